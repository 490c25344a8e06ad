"""A minimal ctypes wrapper for Linux Landlock: kernel-enforced, unprivileged file and TCP access control.

Landlock lets a process restrict itself (and every process it later creates) to an allow-list of
file hierarchies and files, irrevocably. The Python sandbox uses it as its main wall: an escape from
the in-process checks (the audit hook) still cannot open a file outside the allow-list, execute a
program, bind or connect a TCP socket, or signal a process outside the sandbox.

Only three syscalls are involved (their numbers are the same on every architecture):
`landlock_create_ruleset` (444), `landlock_add_rule` (445) and `landlock_restrict_self` (446).
The rights handled depend on the kernel's Landlock ABI version: 1 (file rights), 2 (REFER),
3 (TRUNCATE), 4 (TCP bind/connect), 5 (IOCTL_DEV), 6 (scoping of abstract UNIX sockets and signals).

Two properties shape how the sandbox uses it. A restriction applies to the calling thread and the
threads it creates afterwards, never to threads that already exist. And EXECUTE is only checked by
execve: loading shared libraries (dlopen) needs READ_FILE alone, so EXECUTE can be granted nowhere.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable
from dataclasses import dataclass

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38

# Filesystem rights (ABI 1 unless noted).
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5

# Network rights (ABI 4) and scopes (ABI 6).
NET_BIND_TCP = 1 << 0
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # the only rights a rule on a file may carry
READ = READ_FILE | READ_DIR
READ_WRITE = (READ | WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_FIFO | MAKE_SYM
              | REFER | TRUNCATE)


class LandlockError(OSError):
    """Landlock is missing, disabled, or refused a rule."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int
    return libc


def abi_version() -> int:
    """The kernel's Landlock ABI version, or 0 when Landlock is unavailable (old kernel, disabled LSM)."""
    try:
        libc = _libc()
    except OSError:
        return 0
    version = libc.syscall(ctypes.c_long(SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
                           ctypes.c_uint32(CREATE_RULESET_VERSION))
    return max(int(version), 0)


def handled_fs(abi: int) -> int:
    """Every filesystem right the given ABI knows: unhandled rights would stay allowed everywhere."""
    rights = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


@dataclass(frozen=True)
class Rule:
    """Allow `access` on `path` and everything beneath it (a directory), or on the file itself."""

    path: str
    access: int


def restrict_self(rules: Iterable[Rule], *, deny_tcp: bool = True, scope: bool = True) -> int:
    """Restrict this process (and its future children) to `rules`; return the ABI used.

    Everything not allowed by a rule is denied for every handled right: all filesystem rights of the
    ABI, TCP bind/connect when `deny_tcp` and ABI >= 4 (no network rule is added, so no port is
    allowed), and with `scope` and ABI >= 6 abstract UNIX sockets and signals leaving the sandbox.
    Rules whose path does not exist are skipped; rights a rule cannot carry (directory rights on a
    file, rights the ABI lacks) are dropped rather than failing. Raises `LandlockError` when Landlock
    is unavailable or a syscall fails: the caller decides whether running unrestricted is acceptable.
    """
    abi = abi_version()
    if abi < 1:
        raise LandlockError("Landlock is not available on this kernel")
    libc = _libc()
    fs = handled_fs(abi)
    attr = _RulesetAttr(handled_access_fs=fs,
                        handled_access_net=(NET_BIND_TCP | NET_CONNECT_TCP) if deny_tcp and abi >= 4 else 0,
                        scoped=(SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if scope and abi >= 6 else 0)
    # The struct grew over time: pass only the fields this kernel knows (8, 16 or 24 bytes).
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset_fd = libc.syscall(ctypes.c_long(SYS_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size),
                              ctypes.c_uint32(0))
    if ruleset_fd < 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"landlock_create_ruleset failed: {os.strerror(err)}")
    try:
        for rule in rules:
            try:
                fd = os.open(rule.path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                access = rule.access & fs
                if not os.path.isdir(rule.path):
                    access &= FILE_RIGHTS
                if not access:
                    continue
                beneath = _PathBeneathAttr(allowed_access=access, parent_fd=fd)
                if libc.syscall(ctypes.c_long(SYS_ADD_RULE), ctypes.c_int(ruleset_fd),
                                ctypes.c_int(RULE_PATH_BENEATH), ctypes.byref(beneath), ctypes.c_uint32(0)) < 0:
                    err = ctypes.get_errno()
                    raise LandlockError(err, f"landlock_add_rule({rule.path!r}) failed: {os.strerror(err)}")
            finally:
                os.close(fd)
        # Without no_new_privs (or CAP_SYS_ADMIN) restrict_self fails; it also stops setuid escalation.
        if libc.prctl(ctypes.c_int(PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0),
                      ctypes.c_ulong(0)) != 0:
            err = ctypes.get_errno()
            raise LandlockError(err, f"prctl(PR_SET_NO_NEW_PRIVS) failed: {os.strerror(err)}")
        if libc.syscall(ctypes.c_long(SYS_RESTRICT_SELF), ctypes.c_int(ruleset_fd), ctypes.c_uint32(0)) < 0:
            err = ctypes.get_errno()
            raise LandlockError(err, f"landlock_restrict_self failed: {os.strerror(err)}")
    finally:
        os.close(ruleset_fd)
    return abi
