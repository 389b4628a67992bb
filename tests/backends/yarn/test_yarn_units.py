"""The pure parts of tfdist's YARN support: reading the client configuration, the settings
added to a Spark session, the staged jar archive. No cluster."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from tfdist.backends.yarn import conf, rest
from tfdist.backends.yarn import spark as on_yarn
from tfdist.errors import SpecError


def site(**props: str) -> str:
    body = "".join(f"<property><name>{k}</name><value>{v}</value></property>" for k, v in props.items())
    return f"<?xml version='1.0'?><configuration>{body}</configuration>"


def urls(**props: str) -> list[str]:
    return conf.rm_web_urls(conf.parse_site(site(**{k.replace("_", "."): v for k, v in props.items()}), "t"))


def test_rm_web_address_defaults_and_substitution() -> None:
    assert urls() == ["http://0.0.0.0:8088"]
    assert urls(yarn_resourcemanager_hostname="rm.example") == ["http://rm.example:8088"]
    assert conf.rm_web_urls({"yarn.resourcemanager.hostname": "h", "yarn.resourcemanager.webapp.address":
                             "${yarn.resourcemanager.hostname}:9999"}) == ["http://h:9999"]
    assert conf.rm_web_urls({"yarn.http.policy": "HTTPS_ONLY", "yarn.resourcemanager.hostname": "h"}) == \
        ["https://h:8090"]


def test_ha_lists_every_rm_in_order() -> None:
    c = {"yarn.resourcemanager.ha.enabled": "true", "yarn.resourcemanager.ha.rm-ids": "rm1, rm2",
         "yarn.resourcemanager.hostname.rm1": "a", "yarn.resourcemanager.webapp.address.rm2": "b:1234"}
    assert conf.rm_web_urls(c) == ["http://a:8088", "http://b:1234"]


def test_a_self_referencing_value_ends() -> None:
    c = {"yarn.resourcemanager.webapp.address": "${x}", "x": "${x}y"}
    assert conf.resolve(c, "yarn.resourcemanager.webapp.address").startswith("${x}")


@pytest.mark.parametrize(("text", "says"), [
    ("<configuration>", "not valid XML"),
    ('<!DOCTYPE c [<!ENTITY a "aaaa">]><configuration>&a;</configuration>', "declares XML entities"),
    ("<c>" + "x" * (conf.MAX_SITE_BYTES + 1) + "</c>", "larger than"),
])
def test_bad_site_files_are_refused_naming_the_file(text: str, says: str) -> None:
    with pytest.raises(SpecError, match=says):
        conf.parse_site(text, "yarn-site.xml")


def test_no_conf_dir_or_no_site_file_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="HADOOP_CONF_DIR is not set"):
        rest.ResourceManager.from_environ({})
    with pytest.raises(SpecError, match="cannot read"):
        rest.ResourceManager.from_environ({"YARN_CONF_DIR": str(tmp_path)})
    (tmp_path / "yarn-site.xml").write_text(site(**{"yarn.resourcemanager.webapp.address": "r:1"}))
    assert rest.ResourceManager.from_environ({"HADOOP_CONF_DIR": str(tmp_path)}).urls == ["http://r:1"]


def test_session_conf_tags_and_the_staged_archive_unless_the_job_names_jars(tmp_path: Path) -> None:
    archive = tmp_path / "spark-libs.zip"
    got = on_yarn.session_conf({}, "digits", "digits-abc", archive)
    assert got == {"spark.yarn.tags": "tfdist,tfdist-job-digits,tfdist-run-digits-abc",
                   "spark.yarn.archive": f"file://{archive}"}
    for key in on_yarn.JAR_SETTINGS:
        assert "spark.yarn.archive" not in on_yarn.session_conf({key: "hdfs:///x"}, "d", "t", archive)
    assert all(len(t) <= 100 for t in on_yarn.tags("a" * 200, "b" * 200))


def test_jars_are_staged_once_and_again_when_they_change(tmp_path: Path) -> None:
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True)
    (home / "jars" / "a.jar").write_bytes(b"A" * 100)
    (home / "jars" / "b.jar").write_bytes(b"B")
    first = on_yarn.staged_archive(home, tmp_path / "cache")
    assert zipfile.ZipFile(first).namelist() == ["a.jar", "b.jar"]
    assert all(i.compress_type == zipfile.ZIP_STORED for i in zipfile.ZipFile(first).infolist())
    mtime = first.stat().st_mtime_ns
    assert on_yarn.staged_archive(home, tmp_path / "cache") == first and first.stat().st_mtime_ns == mtime
    (home / "jars" / "c.jar").write_bytes(b"C")
    assert on_yarn.staged_archive(home, tmp_path / "cache") != first
    assert not list((tmp_path / "cache").glob("*/.spark-libs-*"))  # no temporary left
    (home / "jars").rename(home / "gone")
    with pytest.raises(SpecError, match="no jars"):
        on_yarn.staged_archive(home, tmp_path / "cache")


def test_ids_are_checked_before_they_reach_a_url() -> None:
    rm = rest.ResourceManager(["http://127.0.0.1:1"], timeout=0.1)
    for bad in ["../../x", "application_1_2/../../", "application_1_2?x=1"]:
        with pytest.raises(rest.RMError, match="not an application id"):
            rm.kill(bad)
    assert rest.node_log("127.0.0.1:1", "../etc", "stdout") is None
    assert rest.node_log("127.0.0.1:1", "container_1_2_01_000001", "../x") is None


def test_an_rm_that_does_not_answer_is_one_error() -> None:
    with pytest.raises(rest.RMError, match="no ResourceManager answers"):
        rest.ResourceManager(["http://127.0.0.1:9"], timeout=1).info()
