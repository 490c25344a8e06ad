"""The Python sandbox: normal use, patched episodes, and abuse that must be contained.

Every abuse test also checks that the very same sandbox still serves a normal call afterwards.
A tiny EHR is written to a fake project folder beside a fake gold file, so the test is fast and
independent of `outputs/`; the real project files are tried too when present.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from pipeline.ehr.patch import Patch, RowEdit
from pipeline.ehr.schema import TABLES

if not sys.platform.startswith("linux"):
    pytest.skip("the sandbox is Linux-only", allow_module_level=True)

from pipeline.gym.sandbox import IMPORT_ROOT, PythonSandbox, SandboxLimits, sandbox_status

LIMITS = SandboxLimits(cpu_seconds=3, wall_seconds=5)
SECRETS = {"HF_TOKEN": "secret-hf-token-123", "OPENAI_API_KEY": "sk-secret-openai-456"}
GOLD = "gold-answer-7f3a"


def _frame(table: str, rows: list[dict]) -> pl.DataFrame:
    schema = TABLES[table].columns
    return pl.DataFrame([{c: r.get(c) for c in schema} for r in rows], schema=schema, orient="row")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fake project: a tiny EHR in outputs/ehr, gold pairs in outputs/pairs, a pyproject.toml."""
    root = tmp_path_factory.mktemp("project")
    ehr = root / "outputs" / "ehr"
    ehr.mkdir(parents=True)
    patients = [(1, "F", 60), (2, "M", 71), (3, "F", 45)]
    _frame("patients", [{"subject_id": s, "gender": g, "anchor_age": a, "anchor_year": 2150} for s, g, a in patients]
           ).write_parquet(ehr / "patients.parquet")
    _frame("labevents", [{"labevent_id": i, "subject_id": 1 + i % 3, "itemid": 50912, "valuenum": 1.0 + i,
                          "valueuom": "mg/dL", "charttime": datetime(2150, 1, 1 + i)} for i in range(9)]
           ).write_parquet(ehr / "labevents.parquet")
    (ehr / "manifest.json").write_text(json.dumps({"source": "synthetic", "now": "2150-06-01 00:00:00",
                                                   "tables": {"patients": {}, "labevents": {}}}))
    (root / "outputs" / "pairs").mkdir()
    pl.DataFrame({"pair_id": ["p1"], "answer": [GOLD]}).write_parquet(root / "outputs" / "pairs" / "pairs.parquet")
    (root / "pyproject.toml").write_text(f'[project]\nname = "{GOLD}"\n')
    return root


@pytest.fixture(scope="module")
def sandbox(project: Path) -> Iterator[PythonSandbox]:
    """One sandbox for the module, started while the parent holds secrets in its environment."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in SECRETS.items():
            mp.setenv(key, value)
        sb = PythonSandbox(project / "outputs" / "ehr", LIMITS)
        yield sb
        sb.close()


def _still_works(sb: PythonSandbox) -> None:
    r = sb.run('ehr["patients"].select(pl.len()).collect()')
    assert r.ok, r.content
    assert r.rows == [[3]]


def _assert_no_leak(content: str) -> None:
    assert GOLD not in content
    assert not any(v in content for v in SECRETS.values())


# -- normal use -------------------------------------------------------------------------------------


def test_query_returns_rows(sandbox: PythonSandbox) -> None:
    r = sandbox.run('ehr["labevents"].filter(pl.col("subject_id") == 1).collect()')
    assert r.ok, r.content
    assert r.row_count == 3 and len(r.rows) == 3
    assert r.columns == list(TABLES["labevents"].columns)
    assert r.content.startswith("3 rows")
    assert r.seconds > 0


def test_print_sql_and_notebook_value(sandbox: PythonSandbox) -> None:
    r = sandbox.run("print('tables:', ehr.tables)\nx = ehr.sql('SELECT COUNT(*) AS n FROM labevents')\nx['n'][0] * 2")
    assert r.ok, r.content
    assert "tables: ['labevents', 'patients']" in r.content
    assert r.content.rstrip().endswith("18")
    lazy = sandbox.run('ehr["labevents"].select("labevent_id")')  # a LazyFrame is collected with a row cap
    assert lazy.ok and lazy.row_count == 9 and lazy.columns == ["labevent_id"]
    assert sandbox.run("x = 1").content == "(no output)"


def test_user_exception_is_an_error_result(sandbox: PythonSandbox) -> None:
    r = sandbox.run("def f(x):\n    return x / 0\n\nprint('before')\nf(1)")
    assert not r.ok
    assert r.content.startswith("ERROR: ZeroDivisionError: division by zero")
    assert "line 2, in f" in r.content and "return x / 0" in r.content and "before" in r.content
    assert "sandbox_child" not in r.content and "pipeline" not in r.content
    syntax = sandbox.run("x = = 1")
    assert not syntax.ok and "SyntaxError" in syntax.content
    missing = sandbox.run('ehr["labevents"].select("no_such_column").collect()')
    assert not missing.ok and "ColumnNotFoundError" in missing.content
    _still_works(sandbox)


def test_output_is_capped(sandbox: PythonSandbox) -> None:
    r = sandbox.run("for i in range(200_000):\n    print('line', i)")
    assert r.ok
    assert len(r.content) <= LIMITS.max_output_chars + 200
    assert "more characters of output dropped" in r.content


# -- patched episodes -------------------------------------------------------------------------------


def test_patch_is_applied_and_base_file_hidden(sandbox: PythonSandbox, project: Path) -> None:
    patch = Patch((RowEdit("delete", "labevents", where={"labevent_id": 4}),
                   RowEdit("update", "labevents", where={"labevent_id": 5}, values={"valuenum": 999.0})))
    base = project / "outputs" / "ehr" / "labevents.parquet"
    r = sandbox.run('ehr["labevents"].select("labevent_id", "valuenum").collect()', patch.to_json())
    assert r.ok, r.content
    ids = [row[0] for row in r.rows]
    assert 4 not in ids and len(ids) == 8
    assert dict((row[0], row[1]) for row in r.rows)[5] == 999.0
    gone = sandbox.run("ehr.sql('SELECT * FROM labevents WHERE labevent_id = 4').height", patch.to_json())
    assert gone.content == "0"
    # The clean values of a patched table must stay out of reach, by every route.
    for code in (f"pl.read_parquet({str(base)!r})", f"open({str(base)!r}, 'rb').read()",
                 f"pl.scan_parquet({str(base)!r}).collect()",
                 f"ehr.sql(\"SELECT * FROM read_parquet('{base}')\")"):
        denied = sandbox.run(code, patch.to_json())
        assert not denied.ok and "Permission" in denied.content, (code, denied.content)
    # An unpatched table's file is allowed; without a patch the same table is whole again.
    other = sandbox.run(f"pl.read_parquet({str(base.with_name('patients.parquet'))!r}).height", patch.to_json())
    assert other.ok and other.content == "3"
    assert sandbox.run('ehr["labevents"].select(pl.len()).collect()').rows == [[9]]
    bad = sandbox.run("1 + 1", '[{"op": "explode", "table": "labevents"}]')  # an environment bug, reported
    assert not bad.ok and "patch" in bad.content
    _still_works(sandbox)


# -- abuse ------------------------------------------------------------------------------------------


def test_gold_and_project_files_unreadable(sandbox: PythonSandbox, project: Path) -> None:
    targets = [project / "outputs" / "pairs" / "pairs.parquet", project / "pyproject.toml",
               project / "outputs" / "ehr" / "manifest.json", IMPORT_ROOT / "pyproject.toml",
               IMPORT_ROOT / "pipeline" / "gym" / "sandbox.py"]
    targets += [p for p in (IMPORT_ROOT / "outputs" / "pairs" / "pairs.parquet",
                            IMPORT_ROOT / "outputs" / "tasks" / "tasks.parquet") if p.exists()]
    for path in targets:
        for code in (f"open({str(path)!r}, 'rb').read()", f"pl.read_parquet({str(path)!r})",
                     f"import os\nos.listdir({str(path.parent)!r})"):
            r = sandbox.run(code)
            assert not r.ok, (code, r.content)
            _assert_no_leak(r.content)
    hub = IMPORT_ROOT / "outputs" / "hub"
    if hub.is_dir():
        r = sandbox.run(f"import glob\nglob.glob({str(hub)!r} + '/**', recursive=True)")
        assert not r.ok or r.content in ("[]", f"[{str(hub) + '/'!r}]"), r.content  # the folder, never its files
    # A symlink from the working directory does not help either.
    r = sandbox.run(f"import os\nos.symlink({str(project / 'pyproject.toml')!r}, 'link')\nopen('link').read()")
    assert not r.ok
    _assert_no_leak(r.content)
    _still_works(sandbox)


def test_parent_secrets_invisible(sandbox: PythonSandbox) -> None:
    assert os.environ["HF_TOKEN"] == SECRETS["HF_TOKEN"]  # the parent does hold them
    r = sandbox.run("import os\nsorted(os.environ.items())")
    assert r.ok, r.content
    _assert_no_leak(r.content)
    assert "HF_TOKEN" not in r.content and "OPENAI_API_KEY" not in r.content
    for path in (f"/proc/{os.getpid()}/environ", f"/proc/{os.getppid()}/environ", "/proc/self/environ",
                 f"/proc/{os.getpid()}/cmdline"):
        r = sandbox.run(f"open({path!r}, 'rb').read()")
        assert not r.ok, (path, r.content)
        _assert_no_leak(r.content)
    _still_works(sandbox)


def test_network_is_unreachable(sandbox: PythonSandbox) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.setblocking(False)
        udp.bind(("127.0.0.1", 0))
        udp.setblocking(False)
        tcp_port, udp_port = server.getsockname()[1], udp.getsockname()[1]
        for code in (f"import socket\nsocket.create_connection(('127.0.0.1', {tcp_port}), timeout=2)",
                     f"import socket\ns = socket.socket()\ns.connect(('127.0.0.1', {tcp_port}))",
                     f"import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                     f"s.sendto(b'leak', ('127.0.0.1', {udp_port}))",
                     "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=2).read()"):
            r = sandbox.run(code)
            assert not r.ok, (code, r.content)
        time.sleep(0.1)
        with pytest.raises(BlockingIOError):
            server.accept()
        with pytest.raises(BlockingIOError):
            udp.recv(16)
    _still_works(sandbox)


def _bomb_processes() -> list[str]:
    """Processes the bombs below would have left running (`sleep 100`)."""
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.split(b"\0")[-2:] == [b"sleep", b"100"] or b"sleep 100" in cmdline:
            found.append(pid)
    return found


def test_fork_bomb_contained(sandbox: PythonSandbox) -> None:
    assert not _bomb_processes()
    bombs = ["import os\nwhile True:\n    os.fork()",
             "import subprocess\nwhile True:\n    subprocess.Popen(['sh', '-c', 'sleep 100'])",
             "import os\nos.system('sleep 100')",
             "import multiprocessing\nmultiprocessing.Process(target=print).start()"]
    if sys.version_info[:2] == (3, 11):  # no audit event for the raw primitive: the kernel layers must refuse it
        bombs.append("import _posixsubprocess, os\nr, w = os.pipe()\nwhile True:\n"
                     "    _posixsubprocess.fork_exec([b'/bin/sleep', b'100'], [b'/bin/sleep'], True, (w,), None,"
                     " None, -1, -1, -1, -1, -1, -1, r, w, True, False, -1, None, None, None, -1, None, True)")
    for code in bombs:
        r = sandbox.run(code)
        assert not r.ok, (code, r.content)
        assert "not allowed" in r.content or "not permitted" in r.content, r.content  # refused, not crashed
        assert r.seconds < LIMITS.wall_seconds + 4
    assert not _bomb_processes()  # nothing left behind
    assert subprocess.run(["true"], check=False).returncode == 0  # the process table is intact
    _still_works(sandbox)


def test_infinite_loop_hits_the_cpu_limit(sandbox: PythonSandbox) -> None:
    r = sandbox.run("while True:\n    pass")
    assert not r.ok and "CPU time limit" in r.content, r.content
    assert r.seconds < LIMITS.wall_seconds + 3
    _still_works(sandbox)


def test_wall_clock_timeout(project: Path) -> None:
    with PythonSandbox(project / "outputs" / "ehr", SandboxLimits(cpu_seconds=2, wall_seconds=1.5)) as sb:
        r = sb.run("import time\ntime.sleep(60)")
        assert not r.ok and "timed out after 1.5 s" in r.content, r.content
        assert r.seconds < 6
        _still_works(sb)


def test_memory_limits(sandbox: PythonSandbox) -> None:
    r = sandbox.run("x = bytearray(50 * 2**30)")
    assert not r.ok and "MemoryError" in r.content, r.content
    r = sandbox.run("chunks = [bytearray(2**26) for _ in range(1000)]")  # on a loaded machine the CPU limit may win
    assert not r.ok and any(s in r.content for s in ("MemoryError", "memory limit", "CPU time limit")), r.content
    r = sandbox.run("pl.select(pl.int_range(0, 3 * 10**9)).sum()")  # native allocation: the process dies
    assert not r.ok and "memory" in r.content.lower(), r.content
    _still_works(sandbox)


def test_disk_limits(sandbox: PythonSandbox) -> None:
    r = sandbox.run("with open('big.bin', 'wb') as f:\n    for _ in range(1024):\n        f.write(b'x' * 2**20)")
    assert not r.ok and ("File too large" in r.content or "No space" in r.content), r.content
    r = sandbox.run("import os\nos.listdir('.')")  # the next call starts in a fresh directory
    assert r.ok and r.content == "[]", r.content
    _still_works(sandbox)


def test_process_exit_and_signals(sandbox: PythonSandbox) -> None:
    for code in ("import sys\nsys.exit(0)", "import os\nos._exit(0)", f"import os\nos.kill({os.getpid()}, 9)",
                 "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", "import ctypes\nctypes.CDLL(None)",
                 "import gc\ngc.get_objects()"):
        r = sandbox.run(code)
        assert not r.ok, (code, r.content)
    _still_works(sandbox)


def test_layers_reported(sandbox: PythonSandbox) -> None:
    status = sandbox_status()
    assert {"landlock_abi", "seccomp", "pids_cgroup", "mode"} <= set(status)
    _still_works(sandbox)
    assert sandbox.layers["audit_hook"]
    if status["landlock_abi"] >= 1:
        assert sandbox.layers["landlock_abi"] == status["landlock_abi"]
        assert status["mode"].startswith("landlock")
    else:
        assert status["mode"].startswith("audit hook only")


def test_audit_hook_alone(project: Path) -> None:
    """With Landlock switched off, the in-process layer still refuses the common routes."""
    gold = project / "outputs" / "pairs" / "pairs.parquet"
    with PythonSandbox(project / "outputs" / "ehr", LIMITS, landlock=False) as sb:
        for code in (f"open({str(gold)!r}, 'rb').read()", f"pl.read_parquet({str(gold)!r})",
                     f"pl.scan_parquet({str(gold)!r}).collect()", "import os\nos.fork()",
                     "import socket\nsocket.socket()"):
            r = sb.run(code)
            assert not r.ok, (code, r.content)
            _assert_no_leak(r.content)
        assert sb.layers["landlock_abi"] == 0
        _still_works(sb)


def test_closed_sandbox(project: Path) -> None:
    sb = PythonSandbox(project / "outputs" / "ehr", LIMITS)
    sb.close()
    r = sb.run("1 + 1")
    assert not r.ok and "closed" in r.content
