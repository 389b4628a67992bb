"""HDFS through WebHDFS, the NameNode's REST API, with the standard library only.

Why not a library: this module runs inside YARN containers and Spark executors (it is part
of the node package tfdist ships there), where no package is installed, only Python. The
candidates all need more: pyarrow's HDFS needs ``libhdfs`` and a Hadoop installation (the
jars on Maven Central ship no ``libhdfs``), and the ``hdfs`` (HdfsCLI) and fsspec packages
are not the standard library. WebHDFS is HTTP and JSON, which ``http.client`` speaks.

What it does: read a file's status, list a directory, expand a glob, download a file
(streamed in chunks from the DataNode the NameNode redirects to; written under a temporary
name and renamed into place at the end, so a reader never sees half a file), upload one (the
two-step CREATE: the NameNode names a DataNode, the data goes there; written under a
temporary name and renamed onto the target), make directories and delete.

Limits, said once here: *simple* authentication only, the user sent as ``user.name``
(``HADOOP_USER_NAME``, else the login name); Kerberos (SPNEGO, delegation tokens) is out of
scope and a kerberized NameNode refuses these requests. Plain HTTP only (no
``dfs.http.policy: HTTPS_ONLY``). One NameNode address per client: with NameNode HA, give the
active one's (or set ``TFDIST_WEBHDFS``). Globs are :mod:`fnmatch` patterns per path
component (``*``, ``?``, ``[...]``), not Hadoop's ``{a,b}`` alternatives.

Every request has a timeout. Every failure is one :class:`WebHdfsError` whose message names
the ``hdfs://`` URI and what went wrong: what the NameNode said (its ``RemoteException``), or
that it could not be reached at the address used. A DataNode that cannot be reached (or
drops the connection mid-read) is retried through the NameNode, which is asked to exclude it
(``excludedatanodes``), so a read survives a lost DataNode as long as another holds a replica.
"""

from __future__ import annotations

import contextlib
import fnmatch
import getpass
import http.client
import json
import os
import re
import stat
import tempfile
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

#: The NameNode's HTTP port when nothing says otherwise (``dfs.namenode.http-address``'s
#: default since Hadoop 3).
DEFAULT_HTTP_PORT = 9870
#: The NameNode's RPC port when an ``hdfs://`` authority names none (``fs.defaultFS``'s).
DEFAULT_RPC_PORT = 8020
#: Seconds any one request (connect, or a read of the reply) may take.
TIMEOUT = 60.0
#: Bytes read from or written to a socket at a time.
CHUNK = 1 << 20
#: Tries of a DataNode for one transfer (each one excluded after it failed).
DATANODE_TRIES = 3
#: The environment variable that names the WebHDFS address (host:port) outright.
ENV_ADDRESS = "TFDIST_WEBHDFS"
_MAX_SITE_BYTES = 1 << 20
_NAMENODE_INFO = "/jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo"
_MAGIC = re.compile(r"[*?[]")
_AUTHORITY = re.compile(r"^(?:[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$")


class WebHdfsError(Exception):
    """A WebHDFS request failed: the message names the URI and the cause. ``exception`` is the
    Java class the NameNode named (``FileNotFoundException``, ``AccessControlException``...),
    or None when it was not reached or gave no RemoteException."""

    def __init__(self, message: str, exception: str | None = None) -> None:
        super().__init__(message)
        self.exception = exception


class Entry(NamedTuple):
    """One file or directory: its absolute HDFS path, its size in bytes (0 for a
    directory), and whether it is a directory."""

    path: str
    size: int
    is_dir: bool


def parse(uri: str) -> tuple[str, str]:
    """``hdfs://HOST[:PORT]/path`` -> (``HOST[:PORT]``, ``/path``). ``hdfs:///path`` (no
    authority: the cluster's default file system) gives ``""``. Refuses (ValueError) any
    other scheme, a query or fragment, a path that is not absolute or has ``.`` or ``..``."""
    if not isinstance(uri, str) or not uri.startswith("hdfs://"):
        raise ValueError(f"{uri!r} is not an hdfs:// URI (hdfs://NAMENODE[:PORT]/path)")
    if any(c in uri for c in "?#\\") or any(ord(c) < 32 or ord(c) == 127 for c in uri):
        raise ValueError(f"{uri!r}: an hdfs:// URI has no query, fragment, backslash or control character")
    rest = uri[len("hdfs://"):]
    authority, slash, path = rest.partition("/")
    if authority and not _AUTHORITY.match(authority):
        raise ValueError(f"{uri!r}: {authority!r} is not a host[:port]")
    if authority and _has_port(authority):
        port = int(authority.rpartition(":")[2])
        if not 0 < port < 65536:
            raise ValueError(f"{uri!r}: port {port} is out of range")
    path = "/" + path if slash else "/"
    if any(part in (".", "..") for part in path.split("/")):
        raise ValueError(f"{uri!r}: the path may not contain . or .. components")
    return authority, _clean(path)


def _clean(path: str) -> str:
    """An absolute path without repeated or trailing slashes (``/`` stays ``/``)."""
    return "/" + "/".join(p for p in path.split("/") if p)


def _read_site(conf_dir: str, name: str) -> dict[str, str]:
    """The properties of a Hadoop ``*-site.xml`` (empty when the file is missing). Hostile
    input: at most 1 MiB, no DTD or entity (refused), only ``<property>`` name/value pairs."""
    path = os.path.join(conf_dir, name)
    # tfdist.regular_file.read_head's way (node code may not import it): opened without
    # blocking, and anything but a regular file (a FIFO, a device) refused unread
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}
    except OSError as err:
        raise WebHdfsError(f"cannot read {path}: {err.strerror or err}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise WebHdfsError(f"{path} is not a regular file")
        try:
            data = f.read(_MAX_SITE_BYTES + 1)
        except OSError as err:
            raise WebHdfsError(f"cannot read {path}: {err.strerror or err}") from None
    if len(data) > _MAX_SITE_BYTES:
        raise WebHdfsError(f"{path} is over {_MAX_SITE_BYTES} bytes; not a Hadoop configuration file")
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        raise WebHdfsError(f"{path} declares a DTD or entities, which no Hadoop configuration file needs")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as err:
        raise WebHdfsError(f"{path} is not well-formed XML ({err})") from None
    props = {}
    for prop in root.iter("property"):
        name_, value = prop.findtext("name"), prop.findtext("value")
        if name_ and value is not None:
            props[name_.strip()] = value.strip()
    return props


def _host_port(authority: str, default_port: int) -> tuple[str, int]:
    """(host, port) of ``host[:port]`` or ``[v6][:port]``, the port defaulted."""
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:] else default_port
    host, sep, port = authority.partition(":")
    return host, int(port) if sep and port else default_port


def _has_port(authority: str) -> bool:
    return ":" in authority.rpartition("]")[2]


def http_address(namenode: str, environ: Mapping[str, str] | None = None) -> str:
    """The WebHDFS address (``host:port``) of the NameNode an ``hdfs://`` authority names.

    In order: ``TFDIST_WEBHDFS`` (``host:port``) when set; else, when ``HADOOP_CONF_DIR``'s
    ``hdfs-site.xml`` gives ``dfs.namenode.http-address`` and the authority is that
    configuration's NameNode (``dfs.namenode.rpc-address`` or ``core-site.xml``'s
    ``fs.defaultFS``, or the authority is empty: the default file system), that address
    (a wildcard host ``0.0.0.0`` replaced by the NameNode's host); else the authority's host
    at the default HTTP port, 9870. Raises WebHdfsError when no address can be told."""
    env = os.environ if environ is None else environ
    override = env.get(ENV_ADDRESS, "").strip()
    if override:
        if not _AUTHORITY.match(override) or not _has_port(override):
            raise WebHdfsError(f"{ENV_ADDRESS}={override!r} is not host:port")
        return override
    conf_dir = env.get("HADOOP_CONF_DIR", "").strip()
    hdfs_site = _read_site(conf_dir, "hdfs-site.xml") if conf_dir else {}
    core_site = _read_site(conf_dir, "core-site.xml") if conf_dir else {}
    configured = hdfs_site.get("dfs.namenode.http-address", "")
    known = set()
    rpc = hdfs_site.get("dfs.namenode.rpc-address", "")
    if rpc:
        known.add(_host_port(rpc, DEFAULT_RPC_PORT))
    default_fs = core_site.get("fs.defaultFS", "")
    if default_fs.startswith("hdfs://"):
        with contextlib.suppress(ValueError):
            authority = parse(default_fs)[0]
            if authority:
                known.add(_host_port(authority, DEFAULT_RPC_PORT))
    if not namenode:
        if not known:
            where = conf_dir or "unset"
            raise WebHdfsError("an hdfs:/// URI names no NameNode and no fs.defaultFS or "
                               f"dfs.namenode.rpc-address says which (HADOOP_CONF_DIR={where}): "
                               "name it: hdfs://HOST[:PORT]/path")
        namenode_host = sorted(known)[0][0]
        if not configured:
            return f"{namenode_host}:{DEFAULT_HTTP_PORT}"
    else:
        namenode_host, _ = _host_port(namenode, DEFAULT_RPC_PORT)
        if not configured or _host_port(namenode, DEFAULT_RPC_PORT) not in known:
            return f"{_bracket(namenode_host)}:{DEFAULT_HTTP_PORT}"
    host, port = _host_port(configured, DEFAULT_HTTP_PORT)
    if host in ("0.0.0.0", "::", ""):
        host = namenode_host
    return f"{_bracket(host)}:{port}"


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def connect(uri: str, user: str | None = None, environ: Mapping[str, str] | None = None,
            timeout: float = TIMEOUT) -> tuple[WebHdfs, str]:
    """A client for the NameNode of an ``hdfs://`` URI, and the URI's path."""
    namenode, path = parse(uri)
    return WebHdfs(http_address(namenode, environ), user, namenode=namenode, timeout=timeout), path


class _Reply:
    """A response and the connection it came on (closed together)."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self.conn, self.resp = conn, resp

    def close(self) -> None:
        self.resp.close()
        self.conn.close()


class WebHdfs:
    """A WebHDFS client of one NameNode at ``address`` (``host:port`` of its HTTP server),
    acting as ``user`` (default: ``HADOOP_USER_NAME``, else the login name). ``namenode``
    (the ``hdfs://`` authority) only makes messages name the URI the caller used. Paths are
    absolute HDFS paths."""

    def __init__(self, address: str, user: str | None = None, *, namenode: str | None = None,
                 timeout: float = TIMEOUT) -> None:
        if not _AUTHORITY.match(address or ""):
            raise WebHdfsError(f"{address!r} is not a WebHDFS address (host:port)")
        self.host, self.port = _host_port(address, DEFAULT_HTTP_PORT)
        self.address = f"{_bracket(self.host)}:{self.port}"
        self.user = user or os.environ.get("HADOOP_USER_NAME") or getpass.getuser()
        self.namenode = self.address if namenode is None else namenode
        self.timeout = timeout

    # -- reading ----------------------------------------------------------------------------

    def status(self, path: str) -> Entry | None:
        """The file or directory at ``path``, or None when there is none."""
        path = self._path(path)
        try:
            got = self._json("GET", path, "GETFILESTATUS")
        except WebHdfsError as err:
            if err.exception == "FileNotFoundException":
                return None
            raise
        return self._entry(path, got.get("FileStatus") or {}, own=True)

    def listdir(self, path: str) -> list[Entry]:
        """What the directory ``path`` holds, sorted by path (a file lists as itself)."""
        path = self._path(path)
        got = self._json("GET", path, "LISTSTATUS")
        statuses = ((got.get("FileStatuses") or {}).get("FileStatus")) or []
        return sorted((self._entry(path, s) for s in statuses), key=lambda e: e.path)

    def glob(self, pattern: str) -> list[tuple[str, int]]:
        """The files matching ``pattern``, sorted by path, as (path, size): each path
        component is an fnmatch pattern (``*``, ``?``, ``[...]``; case-sensitive), matched
        against the names in the directories the components before it matched, like ``hdfs
        dfs -ls`` globs. A directory the whole pattern matches is left out (list it with
        :meth:`listdir`). Nothing matched is an empty list, not an error."""
        pattern = self._path(pattern)
        parts = [p for p in pattern.split("/") if p]
        current: list[Entry] = [Entry("/", 0, True)]
        for part in parts:
            found: list[Entry] = []
            for parent in current:
                if not parent.is_dir:
                    continue
                child = _join(parent.path, part)
                if not _MAGIC.search(part):
                    entry = self.status(child)
                    if entry is not None:
                        found.append(entry)
                    continue
                try:
                    children = self.listdir(parent.path)
                except WebHdfsError as err:
                    if err.exception == "FileNotFoundException":
                        continue
                    raise
                found.extend(e for e in children if fnmatch.fnmatchcase(e.path.rpartition("/")[2], part))
            current = found
            if not current:
                return []
        return sorted((e.path, e.size) for e in current if not e.is_dir)

    def download(self, path: str, local_path: str | os.PathLike[str]) -> int:
        """Copy the file ``path`` to ``local_path``, streamed in chunks; the bytes copied.
        Written to a temporary file beside the target and renamed onto it at the end, so the
        target is either the whole file or untouched. A DataNode that fails mid-way is
        excluded and the read goes on from the same offset at another replica."""
        path = self._path(path)
        local = os.fspath(local_path)
        directory = os.path.dirname(os.path.abspath(local))
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(local)}.", suffix=".part", dir=directory)
        except OSError as err:
            raise WebHdfsError(f"cannot write {local} to download {self._uri(path)}: "
                               f"{err.strerror or err}") from None
        try:
            with os.fdopen(fd, "wb") as out:
                copied = 0
                for chunk in self._read(path):
                    out.write(chunk)
                    copied += len(chunk)
            os.replace(tmp, local)
        except BaseException as err:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(err, OSError):  # the local side (a full disk, a directory in the way)
                raise WebHdfsError(f"cannot write {local} to download {self._uri(path)}: "
                                   f"{err.strerror or err}") from None
            raise
        return copied

    def read(self, path: str) -> bytes:
        """The whole file ``path`` in memory (for small files)."""
        return b"".join(self._read(self._path(path)))

    # -- writing ----------------------------------------------------------------------------

    def upload(self, local_path: str | os.PathLike[str], path: str, overwrite: bool = True) -> int:
        """Copy the local file ``local_path`` to ``path``; the bytes copied. Written to
        ``path._COPYING_`` (as ``hdfs dfs -put`` does) and renamed onto ``path`` at the end,
        so readers see the whole file or none. With ``overwrite`` False an existing ``path``
        is an error. The parent directories are made as needed."""
        path = self._path(path)
        local = os.fspath(local_path)
        if not overwrite and self.status(path) is not None:
            raise WebHdfsError(f"{self._uri(path)} exists (overwrite is off)", "FileAlreadyExistsException")
        tmp = path + "._COPYING_"
        try:
            size = self._create(local, tmp)
            self._rename(tmp, path, overwrite)
        except BaseException:
            with contextlib.suppress(WebHdfsError, OSError):
                self.delete(tmp)
            raise
        return size

    def write(self, path: str, data: bytes, overwrite: bool = True) -> int:
        """Write ``data`` as the file ``path`` (through a temporary local file: see upload)."""
        with tempfile.NamedTemporaryFile(prefix="tfdist-webhdfs-") as f:
            f.write(data)
            f.flush()
            return self.upload(f.name, path, overwrite)

    def mkdirs(self, path: str) -> None:
        """Make the directory ``path`` and its parents (no error when it exists)."""
        path = self._path(path)
        if not self._json("PUT", path, "MKDIRS").get("boolean"):
            raise WebHdfsError(f"{self._uri(path)}: the NameNode did not make the directory "
                               "(a file is in the way?)")

    def delete(self, path: str, recursive: bool = False) -> bool:
        """Delete ``path`` (a directory with what it holds only when ``recursive``); False
        when there was nothing to delete."""
        path = self._path(path)
        got = self._json("DELETE", path, "DELETE", recursive="true" if recursive else "false")
        return bool(got.get("boolean"))

    # -- the protocol -----------------------------------------------------------------------

    def _path(self, path: str) -> str:
        if not isinstance(path, str) or not path.startswith("/"):
            raise WebHdfsError(f"{path!r} is not an absolute HDFS path")
        if any(part in (".", "..") for part in path.split("/")) or any(ord(c) < 32 for c in path):
            raise WebHdfsError(f"{path!r}: an HDFS path has no . or .. component and no control character")
        return _clean(path)

    def _uri(self, path: str) -> str:
        return f"hdfs://{self.namenode}{path}"

    def _url(self, path: str, op: str, params: Mapping[str, str]) -> str:
        query = urllib.parse.urlencode({"op": op, "user.name": self.user, **params})
        return f"/webhdfs/v1{urllib.parse.quote(path, safe='/')}?{query}"

    def _entry(self, parent: str, status: Mapping[str, Any], own: bool = False) -> Entry:
        suffix = str(status.get("pathSuffix") or "")
        path = parent if own or not suffix else _join(parent, suffix)
        is_dir = status.get("type") == "DIRECTORY"
        return Entry(path, 0 if is_dir else int(status.get("length") or 0), is_dir)

    def _request(self, method: str, host: str, port: int, url: str, path: str, body: Any = None,
                 headers: Mapping[str, str] | None = None, what: str = "the NameNode") -> _Reply:
        conn = http.client.HTTPConnection(host, port, timeout=self.timeout)
        try:
            conn.request(method, url, body=body, headers=dict(headers or {}))
            return _Reply(conn, conn.getresponse())
        except (OSError, http.client.HTTPException) as err:
            conn.close()
            raise _Unreachable(f"{self._uri(path)}: cannot reach {what}'s WebHDFS at {_bracket(host)}:{port} "
                               f"({_describe(err)})") from None

    def _fail(self, reply: _Reply, path: str, who: str = "the NameNode") -> WebHdfsError:
        """The error a non-success reply means (reads its body, closes it)."""
        status = reply.resp.status
        try:
            raw = reply.resp.read(64 * 1024)
        except (OSError, http.client.HTTPException):
            raw = b""
        finally:
            reply.close()
        try:
            remote = json.loads(raw).get("RemoteException") or {}
        except (ValueError, AttributeError):
            remote = {}
        if isinstance(remote, dict) and remote.get("message"):
            exception = str(remote.get("exception") or "") or None
            return WebHdfsError(f"{self._uri(path)}: {who} said {exception or 'error'} "
                                f"(HTTP {status}): {remote['message']}", exception)
        text = raw.decode("utf-8", "replace").strip().splitlines()
        return WebHdfsError(f"{self._uri(path)}: {who} answered HTTP {status} {reply.resp.reason}"
                            + (f": {text[0][:200]}" if text else ""))

    def _json(self, method: str, path: str, op: str, **params: str) -> dict[str, Any]:
        try:
            reply = self._request(method, self.host, self.port, self._url(path, op, params), path)
        except _Unreachable as err:
            raise WebHdfsError(str(err)) from None
        if reply.resp.status != 200:
            raise self._fail(reply, path)
        try:
            raw = reply.resp.read()
            got = json.loads(raw) if raw.strip() else {}  # RENAME with options answers with no body
        except (ValueError, OSError, http.client.HTTPException) as err:
            raise WebHdfsError(f"{self._uri(path)}: the NameNode's {op} reply is not JSON "
                               f"({_describe(err)})") from None
        finally:
            reply.close()
        if not isinstance(got, dict):
            raise WebHdfsError(f"{self._uri(path)}: the NameNode's {op} reply is not a JSON object")
        return got

    def _redirect(self, method: str, path: str, op: str, params: dict[str, str]) -> tuple[str, int, str]:
        """Ask the NameNode for ``op`` and return the DataNode it redirects to (host, port, url)."""
        try:
            reply = self._request(method, self.host, self.port, self._url(path, op, params), path)
        except _Unreachable as err:
            raise WebHdfsError(str(err)) from None
        if reply.resp.status not in (301, 302, 303, 307, 308):
            raise self._fail(reply, path)
        location = reply.resp.getheader("Location") or ""
        reply.close()
        target = urllib.parse.urlsplit(location)
        if target.scheme != "http" or not target.hostname:
            raise WebHdfsError(f"{self._uri(path)}: the NameNode redirected {op} to {location[:200]!r}, "
                               "not to an http:// DataNode address")
        url = target.path + (f"?{target.query}" if target.query else "")
        return target.hostname, target.port or 80, url

    def _read(self, path: str) -> Iterator[bytes]:
        """The file's bytes in chunks, from the DataNodes; a failing one is excluded and the
        read resumes at the same offset (up to DATANODE_TRIES DataNodes)."""
        offset = 0
        excluded: list[str] = []
        failures: list[str] = []
        length: int | None = None
        while True:
            params = {"offset": str(offset)}
            if excluded:
                params["excludedatanodes"] = ",".join(excluded)
            host, port, url = self._redirect("GET", path, "OPEN", params)
            try:
                reply = self._request("GET", host, port, url, path, what="a DataNode")
            except _Unreachable as err:
                failures.append(str(err))
            else:
                if reply.resp.status != 200:
                    raise self._fail(reply, path, "a DataNode")
                if length is None:
                    declared = reply.resp.getheader("Content-Length")
                    length = offset + int(declared) if declared and declared.isdigit() else None
                try:
                    while True:
                        chunk = reply.resp.read(CHUNK)
                        if not chunk:
                            break
                        offset += len(chunk)
                        yield chunk
                except (OSError, http.client.HTTPException) as err:
                    failures.append(f"{self._uri(path)}: the DataNode at {_bracket(host)}:{port} failed "
                                    f"after {offset} bytes ({_describe(err)})")
                else:
                    if length is None or offset >= length:
                        return
                    failures.append(f"{self._uri(path)}: the DataNode at {_bracket(host)}:{port} ended the "
                                    f"file at {offset} of {length} bytes")
                finally:
                    reply.close()
            excluded.append(self._datanode_id(host, port))
            if len(failures) >= DATANODE_TRIES:
                raise WebHdfsError(f"{failures[-1]}; gave up after {len(failures)} DataNode(s)")

    def _datanode_id(self, host: str, port: int) -> str:
        """How ``excludedatanodes`` names the DataNode whose HTTP server is ``host:port``: its
        transfer address (``ip:xferPort``), which the redirect does not show; the NameNode's
        JMX bean NameNodeInfo maps one to the other. When that cannot be read the HTTP
        address is given (the NameNode ignores a name it does not know; the retry may then
        land on the same DataNode until the NameNode marks it stale)."""
        try:
            reply = self._request("GET", self.host, self.port, _NAMENODE_INFO, "/")
        except _Unreachable:
            return f"{host}:{port}"
        try:
            if reply.resp.status != 200:
                return f"{host}:{port}"
            bean = (json.loads(reply.resp.read(4 << 20)).get("beans") or [{}])[0]
            nodes = {**json.loads(bean.get("LiveNodes") or "{}"), **json.loads(bean.get("DeadNodes") or "{}")}
        except (ValueError, AttributeError, TypeError, OSError, http.client.HTTPException):
            return f"{host}:{port}"
        finally:
            reply.close()
        for name, node in nodes.items():
            info = str((node or {}).get("infoAddr") or "") if isinstance(node, dict) else ""
            if info == f"{_bracket(host)}:{port}":
                return str(node.get("xferaddr") or name)
        return f"{host}:{port}"

    def _create(self, local: str, path: str) -> int:
        try:
            size = os.stat(local).st_size
        except OSError as err:
            raise WebHdfsError(f"cannot read {local} to upload it to {self._uri(path)}: "
                               f"{err.strerror or err}") from None
        excluded: list[str] = []
        failures: list[str] = []
        while True:
            params = {"overwrite": "true"}
            if excluded:
                params["excludedatanodes"] = ",".join(excluded)
            host, port, url = self._redirect("PUT", path, "CREATE", params)
            try:
                with open(local, "rb") as body:
                    reply = self._request("PUT", host, port, url, path, body=body, what="a DataNode",
                                          headers={"Content-Type": "application/octet-stream",
                                                   "Content-Length": str(size)})
            except _Unreachable as err:
                failures.append(str(err))
            except OSError as err:
                raise WebHdfsError(f"cannot read {local} to upload it to {self._uri(path)}: "
                                   f"{err.strerror or err}") from None
            else:
                if reply.resp.status not in (200, 201):
                    raise self._fail(reply, path, "a DataNode")
                reply.close()
                return size
            excluded.append(self._datanode_id(host, port))
            if len(failures) >= DATANODE_TRIES:
                raise WebHdfsError(f"{failures[-1]}; gave up after {len(failures)} DataNode(s)")

    def _rename(self, src: str, dst: str, overwrite: bool) -> None:
        params = {"destination": dst}
        if overwrite:
            params["renameoptions"] = "OVERWRITE"
        got = self._json("PUT", src, "RENAME", **params)
        if overwrite:
            return  # the options form answers with an empty body and fails by exception
        if not got.get("boolean"):
            raise WebHdfsError(f"{self._uri(dst)}: the NameNode did not rename {src} onto it (it exists?)")


class _Unreachable(Exception):
    """A connection that failed (a WebHdfsError once the caller decided it is final)."""


def _join(parent: str, name: str) -> str:
    return parent.rstrip("/") + "/" + name


def _describe(err: BaseException) -> str:
    if isinstance(err, TimeoutError):
        return "timed out"
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
