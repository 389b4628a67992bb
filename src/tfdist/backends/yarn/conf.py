"""Where a YARN cluster's ResourceManager answers, read from the client configuration.

Pure: the caller reads ``yarn-site.xml`` (from ``HADOOP_CONF_DIR`` or ``YARN_CONF_DIR``, as
Hadoop's own clients do) and these functions decide. Only what tfdist needs is understood:
the RM web addresses (one, or one per RM id with HA), HTTP or HTTPS (``yarn.http.policy``),
and Hadoop's ``${name}`` substitution within the file.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from tfdist.errors import SpecError
from tfdist.regular_file import read_head

#: A yarn-site.xml larger than this is refused (a real one is tens of kB).
MAX_SITE_BYTES = 4 * 1024 * 1024
_VAR = re.compile(r"\$\{([^}$]{1,200})\}")
_DEFAULTS = {
    "yarn.resourcemanager.hostname": "0.0.0.0",
    "yarn.resourcemanager.webapp.address": "${yarn.resourcemanager.hostname}:8088",
    "yarn.resourcemanager.webapp.https.address": "${yarn.resourcemanager.hostname}:8090",
    "yarn.http.policy": "HTTP_ONLY",
    "yarn.resourcemanager.address": "${yarn.resourcemanager.hostname}:8032",
    "yarn.resourcemanager.scheduler.address": "${yarn.resourcemanager.hostname}:8030",
}
_RPC_PORTS = {"yarn.resourcemanager.address": 8032, "yarn.resourcemanager.scheduler.address": 8030}


def conf_dir(environ: dict[str, str]) -> Path | None:
    """The client configuration directory Hadoop's tools would use, or None."""
    for var in ("HADOOP_CONF_DIR", "YARN_CONF_DIR"):
        if environ.get(var):
            return Path(environ[var])
    return None


def parse_site(text: str, source: str) -> dict[str, str]:
    """The name -> value pairs of a Hadoop ``*-site.xml``; SpecError when it is not one."""
    if len(text) > MAX_SITE_BYTES:
        raise SpecError(f"{source}: larger than {MAX_SITE_BYTES >> 20} MiB; "
                        "is it a Hadoop configuration file?")
    if "<!ENTITY" in text:  # a DTD with entities has no place in a site file (entity bombs)
        raise SpecError(f"{source}: declares XML entities; a Hadoop configuration file has none")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        raise SpecError(f"{source}: not valid XML ({err})") from None
    found: dict[str, str] = {}
    for prop in root.iter("property"):
        name, value = prop.findtext("name"), prop.findtext("value")
        if name is not None:
            found[name.strip()] = (value or "").strip()
    return found


def resolve(conf: dict[str, str], key: str) -> str:
    """``key``'s value with Hadoop's ``${name}`` substitution (depth-limited, as Hadoop's is)."""
    value = conf.get(key, _DEFAULTS.get(key, ""))
    for _ in range(20):
        new = _VAR.sub(lambda m: conf.get(m.group(1), _DEFAULTS.get(m.group(1), m.group(0))), value)
        if new == value:
            break
        value = new
    return value


def rm_web_urls(conf: dict[str, str]) -> list[str]:
    """The base URL of every ResourceManager's web services (several with HA, in RM-id order)."""
    https = resolve(conf, "yarn.http.policy").upper() == "HTTPS_ONLY"
    key = "yarn.resourcemanager.webapp.https.address" if https else "yarn.resourcemanager.webapp.address"
    scheme = "https" if https else "http"
    if resolve(conf, "yarn.resourcemanager.ha.enabled").lower() == "true":
        ids = [i.strip() for i in resolve(conf, "yarn.resourcemanager.ha.rm-ids").split(",") if i.strip()]
        urls = []
        for rm in ids:
            address = resolve(conf, f"{key}.{rm}")
            if not address:
                host = resolve(conf, f"yarn.resourcemanager.hostname.{rm}")
                address = f"{host}:{8090 if https else 8088}" if host else ""
            if address:
                urls.append(f"{scheme}://{address}")
        if urls:
            return urls
    return [f"{scheme}://{resolve(conf, key)}"]


def rm_rpc_addresses(conf: dict[str, str], key: str) -> list[tuple[str, int]]:
    """Where every ResourceManager serves one of its RPC protocols (``key``:
    ``yarn.resourcemanager.address``, its clients', or ``...scheduler.address``, its AMs'),
    as (host, port), in RM-id order with HA."""
    keys = [key]
    if resolve(conf, "yarn.resourcemanager.ha.enabled").lower() == "true":
        ids = [i.strip() for i in resolve(conf, "yarn.resourcemanager.ha.rm-ids").split(",") if i.strip()]
        keys = [f"{key}.{rm}" for rm in ids] or keys
    out = []
    for name in keys:
        address = resolve(conf, name)
        if not address and name != key:  # an HA RM named by its host only: the default port
            host = resolve(conf, "yarn.resourcemanager.hostname." + name.rsplit(".", 1)[1])
            address = f"{host}:{_RPC_PORTS[key]}" if host else ""
        host, _, port = address.rpartition(":")
        if host and port.isdigit():
            out.append((host, int(port)))
    return out


def read_site(directory: Path | None) -> dict[str, str]:
    """``directory``/yarn-site.xml's properties, or {} when there is none to read (the
    callers fall back on Hadoop's defaults)."""
    if directory is None:
        return {}
    try:
        data = read_head(directory / "yarn-site.xml", MAX_SITE_BYTES)
        return parse_site(data.decode("utf-8", "replace"), str(directory / "yarn-site.xml"))
    except (OSError, SpecError):
        return {}


def rm_urls_from(directory: Path) -> list[str]:
    """The ResourceManager web URLs named by ``directory``/yarn-site.xml; SpecError when the
    file is missing or unreadable (the message names the variable that pointed there)."""
    site = directory / "yarn-site.xml"
    try:
        data = read_head(site, MAX_SITE_BYTES)
    except OSError as err:
        raise SpecError(f"HADOOP_CONF_DIR: cannot read {site} ({err.strerror}); point HADOOP_CONF_DIR "
                        "at the cluster's client configuration (the directory with yarn-site.xml)") from None
    return rm_web_urls(parse_site(data.decode("utf-8", "replace"), str(site)))
