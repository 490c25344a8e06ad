"""The `execute_python` tool: agent-written Python run in a throw-away, walled-off process.

Each call runs in a fresh child (`pipeline/gym/sandbox_child.py`) in its own temporary directory and
process group, with a minimal environment (no parent secrets). The walls, outermost first:

- parent: a wall-clock limit (the whole process group is killed), a pids cgroup capping processes
  and threads (v1 `pids` controller, when writable), the captured output and rows capped;
- kernel, set up by the child before any agent code runs: resource limits (CPU seconds, address
  space, file size, no core dumps); an empty network namespace; as root a private mount namespace
  with a size-capped `noexec` tmpfs as working directory; every capability dropped; no_new_privs;
  a seccomp filter (no fork/exec, no sockets, no ptrace, mounts or module loading); Landlock: read
  access only to the Python installation, system libraries and the episode's unpatched Parquet
  files, read/write only to the working directory, no program execution, no TCP, no signals or
  abstract UNIX sockets outside the sandbox;
- in-process: a `sys.addaudithook` refusing the same things with readable errors.

The gold data (`outputs/` besides the allowed tables, the pairs, the hub dataset), the project
source and the base file of any table the episode's patch edits are therefore unreadable; the
patched tables themselves are materialised here, on the trusted side, and sent to the child as
Arrow IPC, so the child never holds their clean rows or the patch (which says what changed). Any
abuse (gold reads, sockets, fork bombs, infinite loops, huge allocations) ends as an error result,
and the next call gets a new child. To keep calls fast the next child is started, and has imported
polars and opened the base EHR, while the agent thinks.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import platform
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from pipeline.ehr.access import EHR, MANIFEST, EHRNotBuiltError
from pipeline.ehr.patch import Patch
from pipeline.gym import landlock
from pipeline.gym.results import ToolResult
from pipeline.gym.sandbox_child import RESPONSE_MARKER

CHILD_SCRIPT = Path(__file__).resolve().with_name("sandbox_child.py")
IMPORT_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the `pipeline` package
CGROUP_PIDS = Path("/sys/fs/cgroup/pids")
CGROUP_PREFIX = "ehr-robustgym-sandbox-"
STARTUP_TIMEOUT = 60.0  # seconds a child may take to import polars and open the EHR before the call starts
RESPONSE_TAIL = 32 * 2**20  # bytes of the child's stdout searched for the response


@dataclass(frozen=True)
class SandboxLimits:
    """Per-call limits. `memory_bytes` caps the address space (polars and numpy take ~0.4 GB of it)."""

    cpu_seconds: int = 10
    wall_seconds: float = 20.0
    memory_bytes: int = 2 * 2**30
    max_output_chars: int = 4000
    max_processes: int = 32  # tasks (processes and threads) in the pids cgroup; polars uses ~12
    file_bytes: int = 64 * 2**20  # largest file the code may write
    tmpfs_bytes: int = 256 * 2**20  # total size of the working directory (root only: a private tmpfs)
    max_rows: int = 1000  # structured rows returned for a frame result


def _cgroup_available() -> bool:
    return (CGROUP_PIDS / "cgroup.procs").is_file() and os.access(CGROUP_PIDS, os.W_OK)


def sandbox_status() -> dict[str, Any]:
    """Which walls this machine can put up, and the resulting mode (for logs and the run report)."""
    abi = landlock.abi_version()
    root = os.geteuid() == 0
    status = {
        "landlock_abi": abi,
        "landlock_network": abi >= 4,
        "landlock_scoping": abi >= 6,
        "seccomp": platform.machine() == "x86_64",
        "pids_cgroup": _cgroup_available(),
        "network_namespace": root or Path("/proc/self/ns/user").exists(),
        "private_tmpfs": root,
        "rlimits": True,
        "audit_hook": True,
    }
    if abi >= 1:
        status["mode"] = "landlock + seccomp + namespaces + audit hook" if status["seccomp"] else \
            "landlock + namespaces + audit hook"
    else:
        status["mode"] = ("audit hook only: Landlock is unavailable, so files opened by native code (polars' "
                          "readers beyond the common ones, pyarrow, duckdb) are not contained")
    return status


@dataclass
class _Child:
    """One started child and everything to clean up after it."""

    proc: subprocess.Popen[bytes]
    workdir: Path
    stdout: IO[bytes]  # the response (a file, not a pipe: nothing to drain while the code runs)
    stderr: IO[bytes]
    pidfd: int | None  # to wait for the exit without reaping, so the pid and group stay ours to kill
    ready: int | None  # read end of the pipe the child writes one byte to once it waits for the call
    cgroup: Path | None


class PythonSandbox:
    """Runs agent code against one EHR folder; `run(code, patch_json)` never raises on bad code.

    One call at a time (a lock serialises callers). `close()` (or the context manager, or garbage
    collection, or interpreter exit) stops the pre-started child and removes its directory and cgroup.
    """

    def __init__(self, ehr_dir: str | Path, limits: SandboxLimits = SandboxLimits(), *, landlock: bool = True,
                 prespawn: bool = True):
        self.ehr_dir = Path(ehr_dir).resolve()
        if not (self.ehr_dir / MANIFEST).is_file():
            raise EHRNotBuiltError(f"{self.ehr_dir / MANIFEST} not found: build the EHR first")
        self.limits = limits
        self.landlock = landlock  # False only to test the in-process layer on its own
        self.prespawn = prespawn
        self.layers: dict[str, Any] = {}  # the walls the last call actually ran behind
        self._lock = threading.Lock()
        self._warm: list[_Child] = []  # at most one pre-started child
        self._ehr: EHR | None = None  # the parent's own view, to materialise patched tables
        self._patched: tuple[str, dict[str, bytes]] = ("[]", {})  # the last episode's patched tables
        self._closed = False
        self._finalizer = weakref.finalize(self, _discard_all, self._warm)
        _sweep_stale_cgroups()
        self._prestart()

    # -- public API -----------------------------------------------------------------------------
    def run(self, code: str, patch_json: str = "[]") -> ToolResult:
        """Run `code` on the episode's EHR (base + `patch_json`); the result or an error observation."""
        start = time.perf_counter()
        with self._lock:
            if self._closed:
                return ToolResult.error("the Python sandbox is closed")
            try:
                tables = self._patched_tables(patch_json)
            except Exception as err:  # a malformed episode patch: an environment bug, not the agent's
                return ToolResult.error(f"the episode's patch could not be applied: {type(err).__name__}: {err}",
                                        seconds=round(time.perf_counter() - start, 4))
            try:
                child = self._warm.pop() if self._warm else None
                if child is not None and _wait(child, 0.0):  # the pre-started child died (killed from outside?)
                    _discard(child)
                    child = None
                result = self._call(child or self._spawn(), code, tables)
            except Exception as err:  # infrastructure failure: report it, keep the environment alive
                result = ToolResult.error(f"the Python sandbox failed: {type(err).__name__}: {err}")
            self._prestart()
        result.seconds = round(time.perf_counter() - start, 4)
        return result

    def close(self) -> None:
        with self._lock:
            self._closed = True
            _discard_all(self._warm)

    def __enter__(self) -> PythonSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- child lifecycle -------------------------------------------------------------------------
    def _patched_tables(self, patch_json: str) -> dict[str, bytes]:
        """The tables `patch_json` edits, materialised here (trusted side) as Arrow IPC bytes, so the
        child never sees their clean rows nor the patch; cached for the episode's next calls."""
        if patch_json == self._patched[0]:
            return self._patched[1]
        patch = Patch.from_json(patch_json)
        tables: dict[str, bytes] = {}
        if patch.edits:
            if self._ehr is None:
                self._ehr = EHR(self.ehr_dir)
            view = self._ehr.with_patch(patch)
            for name in sorted(patch.tables):
                buffer = io.BytesIO()
                view[name].collect().write_ipc(buffer, compression="uncompressed")
                tables[name] = buffer.getvalue()
        self._patched = (patch_json, tables)
        return tables

    def _prestart(self) -> None:
        """Start the next call's child now: it imports polars and opens the EHR while the agent thinks."""
        if self.prespawn and not self._closed and not self._warm:
            with contextlib.suppress(OSError):
                self._warm.append(self._spawn())

    def _spawn(self) -> _Child:
        workdir = Path(tempfile.mkdtemp(prefix="ehr-sandbox-"))
        stdout, stderr = tempfile.TemporaryFile(), tempfile.TemporaryFile()  # noqa: SIM115 (closed in _discard)
        ready_r, ready_w = os.pipe()
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": str(workdir),
               "TMPDIR": str(workdir), "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
               "POLARS_MAX_THREADS": "1", "POLARS_TEMP_DIR": str(workdir), "OMP_NUM_THREADS": "1",
               "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}
        try:
            # `-s -P` plus an environment built from scratch is `-I` without `-E`, so PYTHONHASHSEED applies.
            proc = subprocess.Popen([sys.executable, "-s", "-P", str(CHILD_SCRIPT)], stdin=subprocess.PIPE,
                                    stdout=stdout, stderr=stderr, cwd=workdir, env=env, start_new_session=True,
                                    close_fds=True, pass_fds=(ready_w,))
        except OSError:
            os.close(ready_r)
            stdout.close()
            stderr.close()
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        finally:
            os.close(ready_w)
        try:
            pidfd: int | None = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            pidfd = None
        child = _Child(proc, workdir, stdout, stderr, pidfd, ready_r,
                       _cgroup_attach(proc.pid, self.limits.max_processes))
        init = {"import_root": str(IMPORT_ROOT), "ehr_dir": str(self.ehr_dir), "limits": asdict(self.limits),
                "landlock": self.landlock, "ready_fd": ready_w}
        try:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(init).encode() + b"\n")
            proc.stdin.flush()
        except OSError:
            pass  # the child died at start: the call reports it
        return child

    def _call(self, child: _Child, code: str, tables: dict[str, bytes]) -> ToolResult:
        limits = self.limits
        if child.ready is not None:  # the wall clock starts once the child is ready (or dead)
            select.select([child.ready], [], [], STARTUP_TIMEOUT)
        try:
            assert child.proc.stdin is not None
            request = {"code": code, "tables": {name: len(data) for name, data in tables.items()}}
            child.proc.stdin.write(json.dumps(request).encode() + b"\n")
            for data in tables.values():
                child.proc.stdin.write(data)
            child.proc.stdin.close()
        except OSError:
            pass  # died before the call: classified below
        in_cgroup = child.cgroup is not None
        try:
            exited = _wait(child, limits.wall_seconds)
            _kill(child)
            status, usage = _reap(child)
            response = _response(child)
            tail = _stderr_tail(child)
        finally:
            _discard(child)
        if not exited:
            return ToolResult.error(f"execution timed out after {limits.wall_seconds:g} s (the wall-clock limit); "
                                    "the process was killed")
        if response is not None:
            self.layers = {**(response.get("layers") or {}), "pids_cgroup": in_cgroup}
            return ToolResult(ok=bool(response.get("ok")), content=str(response.get("content", "")),
                              columns=list(response.get("columns") or []), rows=list(response.get("rows") or []),
                              row_count=response.get("row_count"), truncated=bool(response.get("truncated")))
        return ToolResult.error(self._explain_death(status, usage, tail))

    def _explain_death(self, status: int, usage: Any, tail: str) -> str:
        """Why a child ended without a response: a CPU or memory limit, a signal, or an exit."""
        limits = self.limits
        cpu = usage.ru_utime + usage.ru_stime if usage is not None else 0.0
        rss = usage.ru_maxrss * 1024 if usage is not None else 0
        memory = f"{limits.memory_bytes / 2**30:.1f} GiB"
        out_of_memory = any(s in tail for s in ("memory allocation of", "MemoryError", "out of memory",
                                                "Cannot allocate memory", "std::bad_alloc"))
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = str(sig)
            if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= limits.cpu_seconds - 0.05):
                return f"exceeded the CPU time limit ({limits.cpu_seconds} s); the process was killed"
            if out_of_memory or rss >= 0.9 * limits.memory_bytes:
                return f"exceeded the memory limit ({memory}); the process was killed ({name})"
            if sig == signal.SIGKILL:
                return f"the Python process was killed by signal {name} (most likely the memory limit, {memory})"
            return f"the Python process was killed by signal {name}" + (f": {tail}" if tail else "")
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
        if out_of_memory:
            return f"exceeded the memory limit ({memory}); the process exited with code {code}"
        return (f"the Python process exited with code {code} without returning a result (did the code end the "
                "process?)" + (f": {tail}" if tail else ""))


# -- helpers on one child (module level: the finalizer must not hold the sandbox) -------------------


def _cgroup_attach(pid: int, max_tasks: int) -> Path | None:
    """Move the child into its own pids cgroup (threads count too); None if not permitted."""
    if not _cgroup_available():
        return None
    path = CGROUP_PIDS / f"{CGROUP_PREFIX}{pid}"
    try:
        path.mkdir()
    except OSError:
        return None
    try:
        (path / "pids.max").write_text(str(max_tasks))
        (path / "cgroup.procs").write_text(str(pid))
    except OSError:
        with contextlib.suppress(OSError):
            path.rmdir()
        return None
    return path


def _sweep_stale_cgroups() -> None:
    """Remove empty cgroups left by sandboxes whose process died without closing (their pid is gone)."""
    if not _cgroup_available():
        return
    for path in CGROUP_PIDS.glob(f"{CGROUP_PREFIX}*"):
        try:
            os.kill(int(path.name.removeprefix(CGROUP_PREFIX)), 0)
        except ProcessLookupError:
            with contextlib.suppress(OSError):
                path.rmdir()  # fails while tasks remain
        except (ValueError, PermissionError):
            continue


def _wait(child: _Child, timeout: float) -> bool:
    """Wait for the child to exit without reaping it; False on timeout (`timeout` 0: just check)."""
    deadline = time.monotonic() + timeout
    if child.pidfd is not None:
        poller = select.poll()
        poller.register(child.pidfd, select.POLLIN)
        while True:
            left = deadline - time.monotonic()
            if poller.poll(max(0, math.ceil(left * 1000))):
                return True
            if left <= 0:
                return False
    while True:  # no pidfd: poll without reaping
        if os.waitid(os.P_PID, child.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)


def _kill(child: _Child) -> None:
    """SIGKILL the process group, then whatever is left in the cgroup (e.g. a process that left the group)."""
    if child.proc.returncode is None:  # not reaped yet, so its pid (the group id) cannot have been reused
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.proc.pid, signal.SIGKILL)
    if child.cgroup is None:
        return
    for _ in range(200):
        try:
            pids = [int(p) for p in (child.cgroup / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return
        if not pids or pids == [child.proc.pid]:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)


def _reap(child: _Child) -> tuple[int, Any]:
    """Collect the exit status and resource usage (CPU seconds, peak RSS) of the killed child."""
    if child.proc.returncode is not None:
        return 0, None
    try:
        _, status, usage = os.wait4(child.proc.pid, 0)
    except ChildProcessError:
        child.proc.returncode = -1
        return 0, None
    child.proc.returncode = os.waitstatus_to_exitcode(status)  # so Popen never waits for it again
    return status, usage


def _response(child: _Child) -> dict[str, Any] | None:
    """The last response line on the child's stdout (output the code wrote to the same fd comes before it)."""
    out = child.stdout
    size = out.seek(0, os.SEEK_END)
    out.seek(max(0, size - RESPONSE_TAIL))
    data = out.read()
    at = data.rfind(RESPONSE_MARKER)
    if at < 0:
        return None
    try:
        response = json.loads(data[at + len(RESPONSE_MARKER):].split(b"\n", 1)[0])
    except ValueError:
        return None
    return response if isinstance(response, dict) and "content" in response else None


def _stderr_tail(child: _Child, chars: int = 600) -> str:
    err = child.stderr
    size = err.seek(0, os.SEEK_END)
    err.seek(max(0, size - 4 * chars))
    lines = [ln for ln in err.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    return "\n".join(lines[-6:])[-chars:]


def _discard(child: _Child) -> None:
    """Kill (if still running), reap, and remove the child's files, descriptors and cgroup."""
    _kill(child)
    _reap(child)
    for stream in (child.proc.stdin, child.stdout, child.stderr):
        with contextlib.suppress(OSError):
            if stream is not None:
                stream.close()
    for fd in (child.pidfd, child.ready):
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
    child.pidfd = child.ready = None
    shutil.rmtree(child.workdir, ignore_errors=True)
    if child.cgroup is not None:
        for _ in range(200):
            try:
                child.cgroup.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:  # tasks still exiting
                _kill(child)
                time.sleep(0.005)
        child.cgroup = None


def _discard_all(children: list[_Child]) -> None:
    while children:
        _discard(children.pop())
