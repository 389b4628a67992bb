"""tfdist.node.webhdfs against a fake WebHDFS on 127.0.0.1 (no cluster): a NameNode that keeps
files in memory and redirects OPEN and CREATE to DataNodes, which may refuse connections or
drop a transfer mid-way, as a lost DataNode would."""

from __future__ import annotations

import json
import os
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tfdist.node import webhdfs
from tfdist.node.webhdfs import Entry, WebHdfs, WebHdfsError


class FakeHdfs:
    """The file system of the fake NameNode: path -> bytes for files, a set of directories."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.dirs: set[str] = {"/"}
        self.requests: list[tuple[str, str, dict[str, str]]] = []  # (method, path, params)
        self.datanodes: list[str] = []  # host:port of the DataNodes OPEN and CREATE go to, in order
        self.drop_after: int | None = None  # a DataNode closes an OPEN after this many bytes (once)
        self.jmx = True  # the NameNode serves its NameNodeInfo bean (DataNodes' HTTP -> transfer addresses)
        self.lock = threading.Lock()

    def add(self, path: str, data: bytes) -> None:
        self.files[path] = data
        parent = path.rpartition("/")[0] or "/"
        while parent not in self.dirs:
            self.dirs.add(parent)
            parent = parent.rpartition("/")[0] or "/"

    def status(self, path: str, suffix: str = "") -> dict[str, Any]:
        if path in self.dirs:
            return {"pathSuffix": suffix, "type": "DIRECTORY", "length": 0}
        return {"pathSuffix": suffix, "type": "FILE", "length": len(self.files[path])}

    def children(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        names = {p[len(prefix):].split("/")[0] for p in [*self.files, *self.dirs] if p.startswith(prefix) and p != prefix}
        return sorted(names)


def _remote(handler: BaseHTTPRequestHandler, code: int, exception: str, message: str) -> None:
    body = json.dumps({"RemoteException": {"exception": exception, "javaClassName": f"java.io.{exception}",
                                           "message": message}}).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _json(handler: BaseHTTPRequestHandler, value: Any) -> None:
    body = json.dumps(value).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served(ThreadingHTTPServer):
    fs: FakeHdfs
    live: str  # the DataNode that works


def _serve(handler: type[BaseHTTPRequestHandler], fs: FakeHdfs | None = None, live: str = "") -> Served:
    server = Served(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.fs, server.live = fs or FakeHdfs(), live
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


class DataNode(BaseHTTPRequestHandler):
    """A DataNode's WebHDFS: OPEN (from an offset) and CREATE's second step."""

    server: Served

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        params = dict(urllib.parse.parse_qsl(url.query))
        path = urllib.parse.unquote(url.path.removeprefix("/webhdfs/v1"))
        data = self.server.fs.files[path][int(params.get("offset", "0")):]
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        with self.server.fs.lock:
            drop, self.server.fs.drop_after = self.server.fs.drop_after, None
        if drop is not None:
            self.wfile.write(data[:drop])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(data)

    def do_PUT(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path.removeprefix("/webhdfs/v1"))
        self.server.fs.add(path, self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()


class NameNode(BaseHTTPRequestHandler):
    """The NameNode's WebHDFS: metadata answered, OPEN and CREATE redirected to a DataNode."""

    server: Served

    def log_message(self, *args: Any) -> None:
        pass

    def _parse(self) -> tuple[str, dict[str, str]]:
        url = urllib.parse.urlsplit(self.path)
        assert url.path.startswith("/webhdfs/v1/")
        params = dict(urllib.parse.parse_qsl(url.query))
        path = urllib.parse.unquote(url.path.removeprefix("/webhdfs/v1")) or "/"
        self.server.fs.requests.append((self.command, path, params))
        return path, params

    def _redirect(self, path: str, params: dict[str, str]) -> None:
        excluded = set(filter(None, params.get("excludedatanodes", "").split(",")))
        # as a NameNode does: a DataNode is excluded by its transfer address, an unknown name ignored
        target = next((d for d in self.server.fs.datanodes if f"xfer-of-{d}" not in excluded), self.server.live)
        query = urllib.parse.urlencode({k: v for k, v in params.items() if k != "excludedatanodes"})
        self.send_response(307)
        self.send_header("Location", f"http://{target}/webhdfs/v1{urllib.parse.quote(path)}?{query}")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _missing(self, path: str) -> bool:
        if path in self.server.fs.files or path in self.server.fs.dirs:
            return False
        _remote(self, 404, "FileNotFoundException", f"File does not exist: {path}")
        return True

    def do_GET(self) -> None:
        if self.path == "/jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo" and self.server.fs.jmx:
            nodes = {f"xfer-of-{d}": {"infoAddr": d, "xferaddr": f"xfer-of-{d}"} for d in self.server.fs.datanodes}
            _json(self, {"beans": [{"LiveNodes": json.dumps(nodes), "DeadNodes": "{}"}]})
            return
        path, params = self._parse()
        if self._missing(path):
            return
        if params["op"] == "GETFILESTATUS":
            _json(self, {"FileStatus": self.server.fs.status(path)})
        elif params["op"] == "LISTSTATUS":
            items = [self.server.fs.status(path)] if path in self.server.fs.files else \
                [self.server.fs.status(f"{path.rstrip('/')}/{n}", n) for n in self.server.fs.children(path)]
            _json(self, {"FileStatuses": {"FileStatus": items}})
        elif params["op"] == "OPEN":
            self._redirect(path, params)
        else:
            _remote(self, 400, "IllegalArgumentException", f"Invalid value for webhdfs parameter op: {params['op']}")

    def do_PUT(self) -> None:
        path, params = self._parse()
        if params["op"] == "CREATE":
            self._redirect(path, params)
        elif params["op"] == "MKDIRS":
            if path in self.server.fs.files:
                _remote(self, 403, "FileAlreadyExistsException", f"Path is not a directory: {path}")
                return
            self.server.fs.dirs.add(path)
            _json(self, {"boolean": True})
        elif params["op"] == "RENAME":
            if self._missing(path):
                return
            dst = params["destination"]
            if dst in self.server.fs.files and params.get("renameoptions") != "OVERWRITE":
                _json(self, {"boolean": False})
                return
            self.server.fs.add(dst, self.server.fs.files.pop(path))
            if params.get("renameoptions"):
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                _json(self, {"boolean": True})

    def do_DELETE(self) -> None:
        path, params = self._parse()
        if path in self.server.fs.files:
            del self.server.fs.files[path]
            _json(self, {"boolean": True})
        elif path in self.server.fs.dirs:
            if self.server.fs.children(path) and params.get("recursive") != "true":
                _remote(self, 403, "PathIsNotEmptyDirectoryException", f"`{path} is non empty': Directory is not empty")
                return
            for p in [p for p in self.server.fs.files if p.startswith(path + "/")]:
                del self.server.fs.files[p]
            self.server.fs.dirs = {d for d in self.server.fs.dirs if d != path and not d.startswith(path + "/")}
            _json(self, {"boolean": True})
        else:
            _json(self, {"boolean": False})


@pytest.fixture
def fake() -> Iterator[tuple[FakeHdfs, str]]:
    fs = FakeHdfs()
    datanode = _serve(DataNode, fs)
    namenode = _serve(NameNode, fs, f"127.0.0.1:{datanode.server_address[1]}")
    try:
        yield fs, f"127.0.0.1:{namenode.server_address[1]}"
    finally:
        namenode.shutdown()
        datanode.shutdown()


# -- parse and the address ---------------------------------------------------------------------

@pytest.mark.parametrize(("uri", "expected"), [
    ("hdfs://nn.example:8020/data/part-0", ("nn.example:8020", "/data/part-0")),
    ("hdfs://nn/data//x/", ("nn", "/data/x")),
    ("hdfs://nn", ("nn", "/")),
    ("hdfs:///apps/x", ("", "/apps/x")),
    ("hdfs://[::1]:9000/a", ("[::1]:9000", "/a")),
])
def test_parse_splits_the_namenode_from_the_path(uri: str, expected: tuple[str, str]) -> None:
    assert webhdfs.parse(uri) == expected


@pytest.mark.parametrize("uri", ["s3://b/k", "/local/path", "hdfs://nn/a?op=DELETE", "hdfs://nn/a#x",
                                 "hdfs://nn/a/../b", "hdfs://nn:0/a", "hdfs://nn:99999/a", "hdfs://user@nn/a",
                                 "hdfs://nn/a\nb", "hdfs://n n/a"])
def test_parse_refuses_what_is_not_an_hdfs_uri(uri: str) -> None:
    with pytest.raises(ValueError, match="hdfs|port|path|host|query"):
        webhdfs.parse(uri)


def _site(conf: Path, name: str, props: dict[str, str]) -> None:
    conf.mkdir(exist_ok=True)
    body = "".join(f"<property><name>{k}</name><value>{v}</value></property>" for k, v in props.items())
    (conf / name).write_text(f"<?xml version='1.0'?><configuration>{body}</configuration>")


def test_the_address_is_the_override_then_the_configuration_then_the_default_port(tmp_path: Path) -> None:
    _site(tmp_path, "hdfs-site.xml", {"dfs.namenode.rpc-address": "127.0.0.1:41000",
                                      "dfs.namenode.http-address": "127.0.0.1:41001"})
    env = {"HADOOP_CONF_DIR": str(tmp_path)}
    assert webhdfs.http_address("127.0.0.1:41000", env) == "127.0.0.1:41001"
    assert webhdfs.http_address("", env) == "127.0.0.1:41001"  # hdfs:/// is this configuration's
    assert webhdfs.http_address("other.example:8020", env) == "other.example:9870"  # not that NameNode
    assert webhdfs.http_address("127.0.0.1:41000", {**env, "TFDIST_WEBHDFS": "10.1.2.3:50070"}) == "10.1.2.3:50070"
    assert webhdfs.http_address("nn", {}) == "nn:9870"


def test_a_wildcard_http_address_takes_the_namenode_s_host(tmp_path: Path) -> None:
    _site(tmp_path, "core-site.xml", {"fs.defaultFS": "hdfs://nn.example"})
    _site(tmp_path, "hdfs-site.xml", {"dfs.namenode.http-address": "0.0.0.0:50070"})
    env = {"HADOOP_CONF_DIR": str(tmp_path)}
    assert webhdfs.http_address("nn.example:8020", env) == "nn.example:50070"
    assert webhdfs.http_address("", env) == "nn.example:50070"


def test_no_address_for_hdfs_without_a_namenode_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(WebHdfsError, match="names no NameNode"):
        webhdfs.http_address("", {"HADOOP_CONF_DIR": str(tmp_path)})
    with pytest.raises(WebHdfsError, match="TFDIST_WEBHDFS='nn' is not host:port"):
        webhdfs.http_address("nn", {"TFDIST_WEBHDFS": "nn"})


def test_a_configuration_with_entities_is_refused(tmp_path: Path) -> None:
    (tmp_path / "hdfs-site.xml").write_text('<!DOCTYPE x [<!ENTITY a "b">]><configuration>&a;</configuration>')
    with pytest.raises(WebHdfsError, match="DTD or entities"):
        webhdfs.http_address("nn", {"HADOOP_CONF_DIR": str(tmp_path)})
    (tmp_path / "hdfs-site.xml").write_text("<configuration><property>")
    with pytest.raises(WebHdfsError, match="not well-formed"):
        webhdfs.http_address("nn", {"HADOOP_CONF_DIR": str(tmp_path)})


def test_a_configuration_that_is_not_a_regular_file_is_refused_unread(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "hdfs-site.xml")  # opening it to read would block without O_NONBLOCK
    with pytest.raises(WebHdfsError, match="hdfs-site.xml is not a regular file"):
        webhdfs.http_address("nn", {"HADOOP_CONF_DIR": str(tmp_path)})


def test_connect_gives_a_client_that_names_the_uri(fake: tuple[FakeHdfs, str]) -> None:
    _, address = fake
    client, path = webhdfs.connect("hdfs://nn.example:8020/nothing/here", environ={"TFDIST_WEBHDFS": address})
    assert path == "/nothing/here"
    with pytest.raises(WebHdfsError) as err:
        client.listdir(path)
    assert "hdfs://nn.example:8020/nothing/here" in str(err.value)
    assert "File does not exist: /nothing/here" in str(err.value)
    assert err.value.exception == "FileNotFoundException"


# -- reading -----------------------------------------------------------------------------------

def test_status_listdir_and_glob(fake: tuple[FakeHdfs, str]) -> None:
    fs, address = fake
    for name, size in [("part-0", 5), ("part-1", 7), ("part-10", 1), ("_SUCCESS", 0)]:
        fs.add(f"/data/clicks/{name}", b"x" * size)
    fs.add("/data/views/part-0", b"abc")
    fs.dirs.add("/data/clicks/part-dir")
    client = WebHdfs(address, user="alice")
    assert client.status("/data/clicks/part-1") == Entry("/data/clicks/part-1", 7, False)
    assert client.status("/data/clicks") == Entry("/data/clicks", 0, True)
    assert client.status("/data/none") is None
    assert client.listdir("/data/clicks/") == [
        Entry("/data/clicks/_SUCCESS", 0, False), Entry("/data/clicks/part-0", 5, False),
        Entry("/data/clicks/part-1", 7, False), Entry("/data/clicks/part-10", 1, False),
        Entry("/data/clicks/part-dir", 0, True)]
    assert client.listdir("/data/views/part-0") == [Entry("/data/views/part-0", 3, False)]
    assert client.glob("/data/clicks/part-?") == [("/data/clicks/part-0", 5), ("/data/clicks/part-1", 7)]
    assert client.glob("/data/*/part-0") == [("/data/clicks/part-0", 5), ("/data/views/part-0", 3)]
    assert client.glob("/data/clicks/part-*") == [("/data/clicks/part-0", 5), ("/data/clicks/part-1", 7),
                                                  ("/data/clicks/part-10", 1)]  # the directory is left out
    assert client.glob("/data/clicks/part-[1]*") == [("/data/clicks/part-1", 7), ("/data/clicks/part-10", 1)]
    assert client.glob("/data/views/part-0") == [("/data/views/part-0", 3)]
    assert client.glob("/data/none/*") == []
    assert client.glob("/data/clicks/*.csv") == []
    assert all(params["user.name"] == "alice" for _, _, params in fs.requests)


def test_download_streams_the_file_and_replaces_the_target_whole(fake: tuple[FakeHdfs, str], tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    fs, address = fake
    data = bytes(range(256)) * 9000  # 2.3 MB, over two chunks
    fs.add("/d/a file", data)
    monkeypatch.setattr(webhdfs, "CHUNK", 1 << 20)
    client = WebHdfs(address)
    target = tmp_path / "local"
    target.write_bytes(b"old")
    assert client.download("/d/a file", target) == len(data)
    assert target.read_bytes() == data
    assert client.read("/d/a file") == data
    with pytest.raises(WebHdfsError, match="File does not exist: /d/missing"):
        client.download("/d/missing", target)
    assert target.read_bytes() == data  # untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local"]  # no temporary file left
    with pytest.raises(WebHdfsError, match=r"cannot write .*/no/such/dir/f to download hdfs://"):
        client.download("/d/a file", tmp_path / "no" / "such" / "dir" / "f")
    (tmp_path / "a-dir").mkdir()
    (tmp_path / "a-dir" / "x").write_bytes(b"")
    with pytest.raises(WebHdfsError, match="cannot write .*a-dir to download"):
        client.download("/d/a file", tmp_path / "a-dir")  # a directory in the way of the rename
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-dir", "local"]


def test_a_datanode_that_cannot_be_reached_is_excluded_and_the_read_goes_on(fake: tuple[FakeHdfs, str],
                                                                            tmp_path: Path) -> None:
    fs, address = fake
    fs.add("/d/f", b"payload" * 1000)
    dead = f"127.0.0.1:{_closed_port()}"
    fs.datanodes = [dead]
    WebHdfs(address).download("/d/f", tmp_path / "f")
    assert (tmp_path / "f").read_bytes() == b"payload" * 1000
    opens = [params for method, _, params in fs.requests if params["op"] == "OPEN"]
    assert [o.get("excludedatanodes") for o in opens] == [None, f"xfer-of-{dead}"]


def test_without_the_namenode_s_bean_a_datanode_is_excluded_by_its_http_address(fake: tuple[FakeHdfs, str],
                                                                              tmp_path: Path) -> None:
    fs, address = fake
    fs.add("/d/f", b"x")
    fs.jmx = False
    dead = f"127.0.0.1:{_closed_port()}"
    fs.datanodes = [dead]  # this NameNode does not know the name: it redirects there again
    with pytest.raises(WebHdfsError, match="gave up after 3 DataNode"):
        WebHdfs(address).download("/d/f", tmp_path / "f")
    opens = [params for method, _, params in fs.requests if params["op"] == "OPEN"]
    assert [o.get("excludedatanodes") for o in opens] == [None, dead, f"{dead},{dead}"]


def test_a_datanode_that_drops_the_transfer_is_resumed_at_the_offset_elsewhere(fake: tuple[FakeHdfs, str],
                                                                              tmp_path: Path) -> None:
    fs, address = fake
    data = bytes(range(256)) * 400
    fs.add("/d/f", data)
    fs.drop_after = 30000
    assert WebHdfs(address).download("/d/f", tmp_path / "f") == len(data)
    assert (tmp_path / "f").read_bytes() == data
    opens = [params for method, _, params in fs.requests if params["op"] == "OPEN"]
    assert len(opens) == 2 and opens[0]["offset"] == "0" and int(opens[1]["offset"]) > 0
    assert opens[1]["excludedatanodes"]


def test_no_datanode_left_is_one_error_naming_the_uri(fake: tuple[FakeHdfs, str], tmp_path: Path) -> None:
    fs, address = fake
    fs.add("/d/f", b"x")
    fs.datanodes = [f"127.0.0.1:{_closed_port()}" for _ in range(webhdfs.DATANODE_TRIES)]
    with pytest.raises(WebHdfsError, match=r"hdfs://nn/d/f: cannot reach a DataNode's WebHDFS .*gave up after 3"):
        WebHdfs(address, namenode="nn").download("/d/f", tmp_path / "f")
    assert list(tmp_path.iterdir()) == []


# -- writing -----------------------------------------------------------------------------------

def test_upload_creates_through_a_temporary_name_and_renames(fake: tuple[FakeHdfs, str], tmp_path: Path) -> None:
    fs, address = fake
    local = tmp_path / "model.bin"
    local.write_bytes(b"weights" * 5000)
    client = WebHdfs(address)
    assert client.upload(local, "/models/ctr/model.bin") == 35000
    assert fs.files == {"/models/ctr/model.bin": b"weights" * 5000}
    creates = [p for m, p, params in fs.requests if params["op"] == "CREATE"]
    assert creates == ["/models/ctr/model.bin._COPYING_"]
    local.write_bytes(b"new")
    client.upload(local, "/models/ctr/model.bin")
    assert fs.files["/models/ctr/model.bin"] == b"new"
    with pytest.raises(WebHdfsError, match="exists"):
        client.upload(local, "/models/ctr/model.bin", overwrite=False)
    with pytest.raises(WebHdfsError, match="cannot read"):
        client.upload(tmp_path / "missing", "/models/x")
    assert client.write("/models/small", b"abc") == 3
    assert fs.files["/models/small"] == b"abc"


def test_mkdirs_and_delete(fake: tuple[FakeHdfs, str]) -> None:
    fs, address = fake
    client = WebHdfs(address)
    client.mkdirs("/out/ckpt")
    assert "/out/ckpt" in fs.dirs
    fs.add("/out/ckpt/a", b"1")
    with pytest.raises(WebHdfsError, match="PathIsNotEmptyDirectoryException .*Directory is not empty") as err:
        client.delete("/out/ckpt")
    assert err.value.exception == "PathIsNotEmptyDirectoryException"
    assert client.delete("/out/ckpt", recursive=True) is True
    assert client.delete("/out/ckpt") is False
    fs.add("/out/file", b"")
    with pytest.raises(WebHdfsError, match="Path is not a directory"):
        client.mkdirs("/out/file")


def test_paths_must_be_absolute_and_plain(fake: tuple[FakeHdfs, str]) -> None:
    client = WebHdfs(fake[1])
    for bad in ["relative", "/a/../b", "/a\nb"]:
        with pytest.raises(WebHdfsError, match="absolute HDFS path|no . or .. component"):
            client.status(bad)


# -- failures ----------------------------------------------------------------------------------

def test_a_namenode_that_is_down_is_one_error_at_once() -> None:
    port = _closed_port()
    client = WebHdfs(f"127.0.0.1:{port}", namenode="nn:8020")
    with pytest.raises(WebHdfsError, match=rf"hdfs://nn:8020/data: cannot reach the NameNode's WebHDFS at "
                                           rf"127.0.0.1:{port} \(ConnectionRefusedError"):
        client.listdir("/data")


def test_a_namenode_that_does_not_answer_times_out() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)  # accepts (the kernel does), never answers
        client = WebHdfs(f"127.0.0.1:{listener.getsockname()[1]}", timeout=0.3)
        with pytest.raises(WebHdfsError, match="cannot reach the NameNode's WebHDFS .*timed out"):
            client.status("/x")


def test_a_reply_that_is_not_webhdfs_is_named() -> None:
    class Proxy(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(502, "Bad Gateway")
            self.send_header("Content-Length", "11")
            self.end_headers()
            self.wfile.write(b"proxy error")

    server = _serve(Proxy)
    try:
        client = WebHdfs(f"127.0.0.1:{server.server_address[1]}", namenode="nn")
        with pytest.raises(WebHdfsError, match="hdfs://nn/x: the NameNode answered HTTP 502 Bad Gateway: proxy error"):
            client.status("/x")
    finally:
        server.shutdown()


def test_a_bad_address_is_refused() -> None:
    with pytest.raises(WebHdfsError, match="not a WebHDFS address"):
        WebHdfs("http://nn:9870")
