"""The child side of the Python sandbox: one process per `execute_python` call, run as a script.

`pipeline.gym.sandbox` starts `python -s -P <this file>` in a fresh temporary directory with a
minimal environment and talks to it over stdin/stdout in two JSON lines:

1. at spawn, `init` {import_root, ehr_dir, limits, landlock, ready_fd}: the child hardens itself
   (resource limits, network + mount namespace with a private `noexec` tmpfs, all capabilities
   dropped, no_new_privs, a seccomp filter), imports polars/numpy/`pipeline.ehr`, opens the base EHR
   and signals readiness — so a call only pays for the episode-specific part;
2. per call, `request` {code, tables: {name: n_bytes}} followed by the Arrow IPC bytes of each
   patched table: the child applies Landlock (the allow-list: the Python installation, system
   libraries, the unpatched tables' files and the working directory), loads the patched tables,
   installs the audit hook, runs the code and writes one response line.

Order matters. Landlock restricts only the calling thread and the threads it creates later, so it
is applied before any polars query has started polars' worker pools: every thread that can do
user-directed I/O is born restricted (checked by thread name). The base file of a patched table
holds the clean values the agent must not see: the parent materialises the patched tables and sends
only the edited data, so the child never holds the clean rows or the patch itself (which would say
what was changed), and those base files are left off the allow-list. Namespaces and capabilities
need privileges that the later layers take away, so they come first, while the process is still
single-threaded (capabilities, no_new_privs and seccomp filters are per thread and inherited).
"""

from __future__ import annotations

import ast
import ctypes
import io
import json
import linecache
import math
import os
import platform
import resource
import sys
import traceback
from collections.abc import Iterator, Mapping
from typing import Any

RESPONSE_MARKER = b"\x1eEHR-SANDBOX-RESULT\x1e"  # precedes the response line on stdout
RESPONSE_LIMIT = 8 * 2**20  # bytes of JSON; above it the structured rows are dropped
USER_FILE = "<sandbox>"  # the file name of the agent's code in tracebacks
SAFE_ENV = ("PATH", "LANG", "LC_ALL", "HOME", "TMPDIR", "PYTHONHASHSEED", "POLARS_MAX_THREADS", "OMP_NUM_THREADS",
            "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "MALLOC_ARENA_MAX")

# Audit events refused outright (CPython 3.11 names) and refused by prefix.
DENIED_EVENTS = frozenset({
    "os.system", "os.exec", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.kill", "os.killpg",
    "os.symlink", "os.link", "os.chroot", "os.startfile", "subprocess.Popen", "signal.pthread_kill",
    "resource.setrlimit", "resource.prlimit", "gc.get_objects", "gc.get_referrers", "gc.get_referents",
    "sqlite3.load_extension", "sqlite3.enable_load_extension", "sys._current_frames",
})
DENIED_PREFIXES = ("socket.", "ctypes.", "syslog.", "_posixsubprocess.", "urllib.", "http.client.", "ftplib.",
                   "smtplib.", "poplib.", "imaplib.", "nntplib.", "telnetlib.", "webbrowser.")
READ_PATH_EVENTS = frozenset({"open", "os.listdir", "os.scandir", "sqlite3.connect", "os.getxattr",
                              "os.listxattr"})
WRITE_PATH_EVENTS = frozenset({"os.remove", "os.rmdir", "os.mkdir", "os.rename", "os.chmod", "os.chown",
                               "os.truncate", "os.utime", "os.setxattr", "os.removexattr", "os.chflags",
                               "os.lchflags"})
PROTECTED_ATTRS = frozenset({"__defaults__", "__kwdefaults__"})  # on the hook and what it calls; __code__ on anything
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

# Linux constants (stable ABI).
CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWUSER = 0x00020000, 0x40000000, 0x10000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 1 << 18
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 38, 47, 4
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
LINUX_CAPABILITY_VERSION_3 = 0x20080522

# seccomp: x86_64 syscalls refused with EPERM. The kernel-side backstop for what the audit hook
# refuses (processes, sockets) plus privileged or kernel-attack-surface calls nothing here needs.
SECCOMP_DENIED_X86_64 = (
    41, 42, 43, 49, 50, 288,  # socket connect accept bind listen accept4
    57, 58, 59, 322,  # fork vfork execve execveat
    101, 310, 311,  # ptrace process_vm_readv/writev
    103, 135, 155, 159, 161, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172, 173,  # syslog .. ioperm
    175, 176, 179, 227, 246, 248, 249, 250, 272, 298, 303, 304, 305, 308, 313, 320, 321, 323,
    425, 426, 427, 428, 429, 430, 431, 432, 433, 442,  # io_uring, new mount API, mount_setattr
)
SYS_CLONE, SYS_CLONE3 = 56, 435
CLONE_THREAD = 0x00010000
AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
SECCOMP_RET_KILL_PROCESS, SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
EPERM, ENOSYS = 1, 38


# ---------------------------------------------------------------------------------------------
# process hardening (runs first, single-threaded)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _set_rlimits(limits: dict[str, Any]) -> None:
    """Memory, file size and core limits now; the CPU limit is set just before the user code runs."""
    for name, value in ((resource.RLIMIT_AS, limits["memory_bytes"]), (resource.RLIMIT_FSIZE, limits["file_bytes"]),
                        (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(name, (int(value), int(value)))
    # RLIMIT_NPROC counts every task of the real user and does not apply to root at all: the pids
    # cgroup is the real bound. Set it relative to the current count so polars' threads still start.
    tasks = _tasks_of_uid(os.getuid())
    if tasks is not None:
        nproc = tasks + int(limits["max_processes"])
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def _tasks_of_uid(uid: int) -> int | None:
    count = 0
    try:
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    if entry.stat().st_uid == uid:
                        count += len(os.listdir(f"/proc/{entry.name}/task"))
                except OSError:
                    continue
    except OSError:
        return None
    return count


def _isolate(libc: ctypes.CDLL, workdir: str, tmpfs_bytes: int) -> dict[str, Any]:
    """An empty network namespace (no interface up: no TCP, UDP or abstract UNIX socket reaches out)
    and, as root, a private mount namespace with a size-capped `noexec` tmpfs on the working
    directory (no disk filling, no loading native code written by the agent)."""
    if libc.unshare(CLONE_NEWNET | CLONE_NEWNS) == 0:
        options = f"size={int(tmpfs_bytes)},nr_inodes=16384,mode=0700".encode()
        private = (libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) == 0
                   and libc.mount(b"tmpfs", workdir.encode(), b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                                  options) == 0)
        if private:
            os.chdir(workdir)  # step onto the tmpfs mounted over the old directory
        return {"network_namespace": True, "private_tmpfs": private}
    for flags in (CLONE_NEWNET, CLONE_NEWUSER | CLONE_NEWNET):  # unprivileged: a user namespace works too
        if libc.unshare(flags) == 0:
            return {"network_namespace": True, "private_tmpfs": False}
    return {"network_namespace": False, "private_tmpfs": False}


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capabilities(libc: ctypes.CDLL) -> bool:
    """Drop every capability (effective, permitted, inheritable, ambient, bounding): as root the agent
    keeps uid 0 but loses what makes root dangerous (module loading, mounts, ptrace, raw I/O...)."""
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0)  # EPERM without CAP_SETPCAP: fine
    libc.prctl(PR_CAP_AMBIENT, ctypes.c_ulong(PR_CAP_AMBIENT_CLEAR_ALL), 0, 0, 0)
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    return libc.capset(ctypes.byref(header), data) == 0


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def _seccomp_program() -> list[tuple[int, int, int, int]]:
    """A classic-BPF filter: refuse the listed syscalls, `clone` without CLONE_THREAD (new processes)
    and `clone3` (ENOSYS, so libc falls back to `clone` for threads); allow everything else."""
    ld_abs, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    denied = SECCOMP_DENIED_X86_64
    n_checks = 3 + len(denied)  # x32 bit, clone, clone3, then one per denied syscall
    allow_at = 4 + n_checks  # index of "ret ALLOW" after the checks
    deny_at, enosys_at, clone_at = allow_at + 1, allow_at + 2, allow_at + 3
    prog = [(ld_abs, 0, 0, 4), (jeq, 1, 0, AUDIT_ARCH_X86_64), (ret, 0, 0, SECCOMP_RET_KILL_PROCESS),
            (ld_abs, 0, 0, 0)]

    def jump_to(target: int) -> int:
        return target - (len(prog) + 1)

    prog.append((jge, jump_to(deny_at), 0, X32_SYSCALL_BIT))
    prog.append((jeq, jump_to(clone_at), 0, SYS_CLONE))
    prog.append((jeq, jump_to(enosys_at), 0, SYS_CLONE3))
    for nr in denied:
        prog.append((jeq, jump_to(deny_at), 0, nr))
    prog += [(ret, 0, 0, SECCOMP_RET_ALLOW), (ret, 0, 0, SECCOMP_RET_ERRNO | EPERM),
             (ret, 0, 0, SECCOMP_RET_ERRNO | ENOSYS),
             (ld_abs, 0, 0, 16),  # low 32 bits of args[0]: the clone flags
             (jset, 0, 1, CLONE_THREAD), (ret, 0, 0, SECCOMP_RET_ALLOW), (ret, 0, 0, SECCOMP_RET_ERRNO | EPERM)]
    assert all(0 <= jt <= 255 and 0 <= jf <= 255 for _, jt, jf, _ in prog)
    return prog


def _install_seccomp(libc: ctypes.CDLL) -> bool:
    if platform.machine() != "x86_64":
        return False  # the syscall table above is x86_64's
    prog = _seccomp_program()
    filters = (_SockFilter * len(prog))(*[_SockFilter(*ins) for ins in prog])
    fprog = _SockFprog(len(prog), ctypes.cast(filters, ctypes.POINTER(_SockFilter)))
    return libc.prctl(PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(fprog), 0, 0) == 0


def harden(limits: dict[str, Any], workdir: str) -> dict[str, Any]:
    """Everything that needs privileges or a single thread, in order; returns the layers applied."""
    _set_rlimits(limits)
    libc = _libc()
    layers = _isolate(libc, workdir, limits["tmpfs_bytes"])
    layers["capabilities_dropped"] = _drop_capabilities(libc)
    layers["no_new_privs"] = libc.prctl(PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), 0, 0, 0) == 0
    layers["seccomp"] = layers["no_new_privs"] and _install_seccomp(libc)
    return layers


# ---------------------------------------------------------------------------------------------
# what the agent's code sees


class EpisodeEHR(Mapping[str, Any]):
    """The episode's EHR: `ehr["labevents"]` is a polars LazyFrame, `ehr.sql(query)` a DataFrame.

    Patched tables are in-memory frames with the episode's edits; the others scan their Parquet files.
    """

    def __init__(self, frames: dict[str, Any], now: Any) -> None:
        self._frames = frames
        self.now = now  # the fixed "now" relative dates are anchored to

    def __getitem__(self, name: str) -> Any:
        try:
            return self._frames[name]
        except KeyError:
            raise KeyError(f"unknown table {name!r}; tables: {', '.join(self.tables)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._frames))

    def __len__(self) -> int:
        return len(self._frames)

    @property
    def tables(self) -> list[str]:
        return sorted(self._frames)

    def sql(self, query: str) -> Any:
        """Run one Polars SQL query over the episode's tables and collect it."""
        import polars as pl

        with pl.SQLContext(frames=self._frames, eager=False) as ctx:
            return ctx.execute(query).collect()

    def __repr__(self) -> str:
        return f"EHR({len(self)} tables: {', '.join(self.tables)}; now={self.now})"


class _Capture(io.TextIOBase):
    """stdout/stderr of the agent's code: kept up to `cap` characters, the rest counted and dropped."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self._parts: list[str] = []
        self._size = 0
        self._cap = cap
        self.dropped = 0

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        room = self._cap - self._size
        if room > 0:
            self._parts.append(text[:room])
            self._size += min(len(text), room)
        self.dropped += max(len(text) - max(room, 0), 0)
        return len(text)

    def getvalue(self, limit: int | None = None) -> str:
        """The output, cut to `limit` characters with a note saying how much was dropped."""
        text = "".join(self._parts)
        dropped = self.dropped
        if limit is not None and len(text) > limit:
            dropped += len(text) - max(limit - 60, 0)
            text = text[:max(limit - 60, 0)]
        if dropped:
            text += f"\n… ({dropped:,} more characters of output dropped)"
        return text


# ---------------------------------------------------------------------------------------------
# the allow-list


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def python_dirs(protected: list[str]) -> list[str]:
    """The Python installation's directories, minus any that is or contains a protected path (with an
    editable install the project root sits on sys.path; a venv inside the project is fine)."""
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                  *(paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths),
                  *site.getsitepackages(), *(p for p in sys.path if p)}
    keep: list[str] = []
    for cand in candidates:
        real = os.path.realpath(cand)
        if os.path.isdir(real) and not any(_within(p, real) for p in protected):
            keep.append(real)
    return sorted({d for d in keep if not any(d != o and _within(d, o) for o in keep)})


# Threads of polars' query engine: they do user-directed I/O, so they must be born after Landlock
# (which restricts only the calling thread and its future children). jemalloc's background threads
# and polars' spill-file cleaner (confined to POLARS_TEMP_DIR = the working directory) may predate it.
IO_POOL_PREFIXES = ("tokio", "async-executor", "rayon")
SYSTEM_READ_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/sys/devices/system/cpu")
SYSTEM_READ_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/dev/urandom", "/dev/random", "/dev/zero")
SYSTEM_RW_FILES = ("/dev/null",)


def _thread_names() -> list[str]:
    names = []
    for tid in sorted(os.listdir("/proc/self/task")):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            continue
    return names


def apply_landlock(read_dirs: list[str], read_files: list[str], workdir: str) -> dict[str, Any]:
    from pipeline.gym import landlock

    rules = [landlock.Rule(d, landlock.READ) for d in (*read_dirs, *SYSTEM_READ_DIRS)]
    rules += [landlock.Rule(f, landlock.READ_FILE) for f in (*read_files, *SYSTEM_READ_FILES)]
    rules += [landlock.Rule(f, landlock.READ_FILE | landlock.WRITE_FILE | landlock.TRUNCATE)
              for f in SYSTEM_RW_FILES]
    rules.append(landlock.Rule(workdir, landlock.READ_WRITE))
    try:
        abi = landlock.restrict_self(rules)
    except OSError as err:
        return {"landlock_abi": 0, "landlock_error": str(err)}
    return {"landlock_abi": abi, "landlock_error": None}


def install_audit_hook(read_roots: tuple[str, ...], read_files: frozenset[str], write_roots: tuple[str, ...]) -> None:
    """Defence in depth (and the only file wall without Landlock): refuse process creation, sockets,
    ctypes, signals, heap walking, and file access outside the allow-list, raising PermissionError
    (an OSError, so libraries that probe files degrade gracefully).

    Everything the hook uses is bound as a default argument, and replacing the hook's (or those
    functions') defaults or any function's `__code__` is refused, so rebinding module globals does
    not rewire it. It stays a best-effort layer: Landlock and seccomp are the walls.
    """

    def hook(event: str, args: tuple[Any, ...], *, _denied: frozenset[str] = DENIED_EVENTS,
             _prefixes: tuple[str, ...] = DENIED_PREFIXES, _reads: frozenset[str] = READ_PATH_EVENTS,
             _writes: frozenset[str] = WRITE_PATH_EVENTS, _attrs: frozenset[str] = PROTECTED_ATTRS,
             _read_roots: tuple[str, ...] = read_roots, _read_files: frozenset[str] = read_files,
             _write_roots: tuple[str, ...] = write_roots, _realpath: Any = os.path.realpath,
             _fsdecode: Any = os.fsdecode, _write_flags: int = WRITE_FLAGS, _error: type = PermissionError) -> None:
        if event in _denied or event.startswith(_prefixes):
            raise _error(f"{event} is not allowed in the sandbox")
        if event in _reads or event in _writes:
            writing = event in _writes
            if event == "open":
                mode, flags = args[1], args[2]
                writing = bool((isinstance(mode, str) and any(c in mode for c in "wax+"))
                               or (isinstance(flags, int) and flags & _write_flags))
            paths = args[:2] if event == "os.rename" else args[:1]
            for path in paths:
                if path is None or isinstance(path, int):
                    continue  # an already-open descriptor or the working directory
                real = _realpath(_fsdecode(path))
                roots = _write_roots if writing else _read_roots + _write_roots
                if not (any(real == r or real.startswith(r + "/") for r in roots)
                        or (not writing and real in _read_files)):
                    raise _error(13, f"sandbox: {'writing' if writing else 'reading'} this path is not allowed",
                                 _fsdecode(path))
        elif event in ("object.__setattr__", "object.__delattr__") and len(args) > 1 and (
                args[1] == "__code__" or (args[1] in _attrs and any(args[0] is f for f in (hook, _realpath,
                                                                                           _fsdecode)))):
            raise _error(f"changing {args[1]} is not allowed in the sandbox")

    sys.addaudithook(hook)


def guard_polars_readers(pl: Any, read_roots: tuple[str, ...], read_files: frozenset[str]) -> None:
    """Without Landlock, polars' native readers open files behind the audit hook's back: check the
    path arguments of the common readers in Python (best effort; the Rust API stays reachable)."""
    import functools

    def allowed(source: Any) -> bool:
        if isinstance(source, (list, tuple)):
            return all(allowed(s) for s in source)
        if not isinstance(source, (str, bytes, os.PathLike)) or isinstance(source, bytes):
            return True  # in-memory buffers and file objects went through `open` already
        real = os.path.realpath(os.fsdecode(source).split("*")[0])
        return real in read_files or any(real == r or real.startswith(r + "/") for r in read_roots)

    for name in ("read_parquet", "scan_parquet", "read_csv", "scan_csv", "read_ipc", "scan_ipc", "read_ndjson",
                 "scan_ndjson", "read_json", "read_excel", "read_ods", "read_avro", "read_delta", "scan_delta",
                 "read_ipc_schema", "read_parquet_schema", "read_parquet_metadata", "scan_iceberg"):
        original = getattr(pl, name, None)
        if original is None:
            continue

        def guarded(source: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            if not allowed(source):
                raise PermissionError(13, "sandbox: reading this path is not allowed", str(source))
            return _original(source, *args, **kwargs)

        setattr(pl, name, functools.wraps(original)(guarded))


# ---------------------------------------------------------------------------------------------
# running the agent's code


def _user_traceback(exc: BaseException, limit: int = 6) -> list[str]:
    frames = [f for f in traceback.StackSummary.extract(traceback.walk_tb(exc.__traceback__), lookup_lines=False)
              if f.filename == USER_FILE]
    if not frames:
        return []
    lines = ["Traceback (your code, most recent call last):"]
    for frame in frames[-limit:]:
        lines.append(f"  line {frame.lineno}, in {frame.name}")
        if frame.line:
            lines.append(f"    {frame.line.strip()}")
    return lines


def format_error(exc: BaseException, limits: dict[str, Any]) -> str:
    """`<ExceptionType>: message` plus the user-code part of the traceback (never the sandbox's)."""
    if isinstance(exc, SyntaxError) and exc.filename == USER_FILE:
        lines = [f"{type(exc).__name__}: {exc.msg} (line {exc.lineno})"]
        if exc.text:
            lines.append(f"    {exc.text.rstrip()}")
            if exc.offset:
                indent = len(exc.text) - len(exc.text.lstrip())
                lines.append("    " + " " * max(exc.offset - 1 - indent, 0) + "^")
        return "\n".join(lines)
    message = str(exc)
    if isinstance(exc, MemoryError) and not message:
        message = f"out of memory (the sandbox's memory limit is {limits['memory_bytes'] / 2**30:.1f} GiB)"
    if isinstance(exc, SystemExit):
        message = f"the code called exit({message})"
    if len(message) > 2000:
        message = message[:2000] + " …"
    return "\n".join([f"{type(exc).__name__}: {message}", *_user_traceback(exc)])


def _render_value(value: Any, limits: dict[str, Any]) -> dict[str, Any]:
    """The last expression's value: frames as a table (with structured rows), anything else as repr."""
    import polars as pl

    from pipeline.gym.results import plain_value, render_table

    max_rows, max_chars = int(limits["max_rows"]), int(limits["max_output_chars"])
    if isinstance(value, pl.Series):
        value = value.to_frame()
    if isinstance(value, pl.LazyFrame):
        frame = value.head(max_rows + 1).collect()
        row_count = frame.height if frame.height <= max_rows else None
        frame = frame.head(max_rows)
    elif isinstance(value, pl.DataFrame):
        frame, row_count = value.head(max_rows), value.height
    else:
        text = repr(value)
        if len(text) > max_chars:
            text = text[:max_chars] + "\n… (output truncated)"
        return {"text": text}
    rows = [[plain_value(v) for v in row] for row in frame.iter_rows()]
    return {"text": render_table(frame, row_count, max_chars=max_chars), "columns": frame.columns, "rows": rows,
            "row_count": row_count, "truncated": row_count is None or row_count > len(rows)}


def _join(*parts: str, cap: int) -> str:
    text = "\n".join(p for p in parts if p)
    if len(text) > cap:
        text = text[:cap] + "\n… (output truncated)"
    return text


def run_code(code: str, namespace: dict[str, Any], limits: dict[str, Any]) -> dict[str, Any]:
    """exec the code like a notebook cell: the value of a final expression is displayed."""
    cap = int(limits["max_output_chars"])
    capture = _Capture(cap)
    saved = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = capture
    try:
        tree = ast.parse(code, USER_FILE, "exec")
        linecache.cache[USER_FILE] = (len(code), None, code.splitlines(True), USER_FILE)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, USER_FILE, "exec"), namespace)
        value = eval(compile(ast.Expression(last.value), USER_FILE, "eval"), namespace) if last else None
        shown = _render_value(value, limits) if value is not None else {"text": ""}
    except BaseException as exc:  # the agent's error, reported, never raised
        sys.stdout, sys.stderr = saved
        error = "ERROR: " + format_error(exc, limits)
        output = capture.getvalue(max(cap - len(error) - 30, cap // 2))
        return {"ok": False, "content": _join(error,
                                              f"Output before the error:\n{output}" if output else "", cap=cap)}
    sys.stdout, sys.stderr = saved
    output = capture.getvalue(max(cap - len(shown["text"]) - 1, cap // 2))
    content = _join(output, shown["text"], cap=cap) or "(no output)"
    return {"ok": True, "content": content, "columns": shown.get("columns", []), "rows": shown.get("rows", []),
            "row_count": shown.get("row_count"), "truncated": shown.get("truncated", False)}


# ---------------------------------------------------------------------------------------------
# main


def _load_base(init: dict[str, Any]) -> Any:
    """Import what the episode needs while the project is still readable, and open the base EHR
    (lazy scans only: no polars query runs before Landlock)."""
    sys.path.insert(0, init["import_root"])
    import numpy  # noqa: F401  (imported now: later the project dir, not site-packages, is off limits)
    import polars  # noqa: F401

    import pipeline.gym.landlock
    import pipeline.gym.results  # noqa: F401
    from pipeline.ehr.access import EHR

    return EHR(init["ehr_dir"])


def prepare_episode(init: dict[str, Any], base: Any, patched: dict[str, bytes],
                    workdir: str) -> tuple[dict[str, Any], dict]:
    """The namespace of one call, with the sandbox's walls up when it returns. `patched` holds the
    episode's edited tables as Arrow IPC bytes; their base files stay off the allow-list."""
    import numpy as np
    import polars as pl

    unknown = [t for t in patched if t not in base]
    if unknown:
        raise ValueError(f"the episode's patch edits tables this EHR lacks: {unknown}")
    root = os.path.realpath(init["ehr_dir"])
    read_files = sorted(os.path.join(root, f"{t}.parquet") for t in base if t not in patched)
    protected = [os.path.realpath(init["import_root"]), root, os.path.dirname(root)]
    read_dirs = python_dirs(protected)
    threads = _thread_names()
    layers: dict[str, Any] = {"threads_before_landlock": threads}
    pools = [t for t in threads if t.startswith(IO_POOL_PREFIXES) or (t.startswith("polars-") and t[7:8].isdigit())]
    if pools:  # they would escape Landlock: refuse rather than run half-walled
        raise RuntimeError(f"polars worker threads {pools} started before Landlock; the sandbox needs updating")
    if init.get("landlock", True):
        layers.update(apply_landlock(read_dirs, read_files, workdir))
    else:
        layers.update({"landlock_abi": 0, "landlock_error": "disabled by the caller"})

    frames = {t: (pl.read_ipc(io.BytesIO(patched.pop(t))).lazy() if t in patched else base[t]) for t in base}
    ehr = EpisodeEHR(frames, base.now)

    for key in list(os.environ):
        if key not in SAFE_ENV:
            del os.environ[key]
    sys.path[:] = [p for p in sys.path if not any(_within(os.path.realpath(p), q) for q in protected)]
    read_roots = (*read_dirs, *SYSTEM_READ_DIRS)
    files = frozenset((*read_files, *SYSTEM_READ_FILES, *(os.path.realpath(f) for f in SYSTEM_READ_FILES)))
    if not layers["landlock_abi"]:
        guard_polars_readers(pl, read_roots, files)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = math.ceil(usage.ru_utime + usage.ru_stime + float(init["limits"]["cpu_seconds"]))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU, then SIGKILL a second later
    install_audit_hook(read_roots, files, (os.path.realpath(workdir), *SYSTEM_RW_FILES))
    layers["audit_hook"] = True
    namespace = {"__name__": "__main__", "__builtins__": __builtins__, "pl": pl, "np": np, "ehr": ehr, "print": print}
    return namespace, layers


def _read_exact(stream: Any, n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise EOFError(f"expected {n} bytes of table data, got {len(data)}")
    return data


def _respond(fd: int, payload: dict[str, Any]) -> None:
    body = json.dumps(payload, default=str).encode()
    if len(body) > RESPONSE_LIMIT:  # huge cells: keep the text, drop the structured rows
        payload = {**payload, "rows": [], "truncated": True}
        body = json.dumps(payload, default=str).encode()
    data = RESPONSE_MARKER + body + b"\n"
    while data:
        data = data[os.write(fd, data):]


def main() -> None:
    response_fd = os.dup(1)
    os.dup2(2, 1)  # native or os.write output to fd 1 lands in the stderr log, not in the response
    workdir = os.getcwd()
    try:
        init = json.loads(sys.stdin.buffer.readline())
        limits = init["limits"]
        layers = harden(limits, workdir)
        base = _load_base(init)
        os.write(init["ready_fd"], b"1")  # the parent starts the wall clock now
        os.close(init["ready_fd"])
        line = sys.stdin.buffer.readline()
        if not line:
            os._exit(0)  # the sandbox closed without a call
        request = json.loads(line)
        code = str(request["code"])
        patched = {str(t): _read_exact(sys.stdin.buffer, int(n)) for t, n in request["tables"].items()}
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        sys.stdin = io.StringIO("")
        namespace, more = prepare_episode(init, base, patched, workdir)
        del request, base, patched
        layers.update(more)
    except BaseException as exc:
        _respond(response_fd, {"ok": False, "content": f"ERROR: the sandbox could not start: "
                                                       f"{type(exc).__name__}: {exc}", "setup_failed": True})
        os._exit(0)
    try:
        result = run_code(code, namespace, limits)
    except MemoryError:
        result = {"ok": False, "content": "ERROR: MemoryError: out of memory while reporting the result"}
    result["layers"] = layers
    try:
        _respond(response_fd, result)
    except (MemoryError, ValueError, TypeError, OverflowError) as exc:
        _respond(response_fd, {"ok": False, "content": f"ERROR: the result could not be reported: {exc}",
                               "layers": layers})
    os._exit(0)  # no atexit handlers, no lingering threads


if __name__ == "__main__":
    main()
