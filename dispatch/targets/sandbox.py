"""The bubblewrap sandbox a managed command runs in, and the egress proxy that
gives a sandbox with `egress=True` its only way out.

Kept apart from `command.run` because it is the security boundary: the argv that
builds the sandbox (an unprivileged uid, read-only system directories, only the
declared paths writable, a private /tmp, no network, its own pid namespace), the
hard rlimits, the once-per-process probe that turns a kernel refusing namespaces
into a clear "sandbox unavailable", and the proxy that sends every connection of a
sandboxed command through the tenant's egress policy and the SSRF guard.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from tenants.models import Tenant

# The sandbox's own tmpfs, never the host's /tmp.
SANDBOX_TMP = "/tmp"  # noqa: S108
BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "TZ": "UTC",
    "HOME": SANDBOX_TMP,
}
NOFILE = 1024
# System directories the sandbox sees read-only (if the host has them); everything
# else of the host — the worker's code, data, secrets, home — is absent.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_sandbox_ok: set[tuple[str, ...]] = set()


class SandboxUnavailable(Exception):
    pass


def sandbox_prefix(registered: Any) -> list[str]:
    """bwrap argv (ending in `--`) for one run of `registered`; SandboxUnavailable if missing."""
    tool = settings.COMMAND_SANDBOX_BWRAP
    bwrap = shutil.which(tool)
    if bwrap is None:
        raise SandboxUnavailable(
            f"managed commands run in the bubblewrap sandbox, and {tool!r} is not installed "
            "on this worker (Debian: apt-get install bubblewrap); refusing to run unsandboxed"
        )
    prefix = [
        bwrap,
        "--unshare-all",  # user, pid, net (loopback only), ipc, uts, cgroup namespaces
        "--unshare-user",
        "--disable-userns",
        "--uid",
        str(settings.COMMAND_SANDBOX_UID),
        "--gid",
        str(settings.COMMAND_SANDBOX_GID),
        "--hostname",
        "sandbox",
        "--die-with-parent",
    ]
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            prefix += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            prefix += ["--ro-bind", path, path]
    prefix += ["--dev", "/dev", "--proc", "/proc"]
    prefix += ["--size", str(settings.COMMAND_SANDBOX_TMP_MB << 20), "--tmpfs", SANDBOX_TMP]
    for path in registered.readable_paths or []:
        prefix += ["--ro-bind", path, path]
    for path in registered.writable_paths or []:
        prefix += ["--bind", path, path]
    prefix += ["--chdir", SANDBOX_TMP, "--"]
    return prefix


def limits_prefix(registered: Any, *, per_sandbox_nproc: bool) -> list[str]:
    """prlimit argv: hard limits the command cannot raise.

    RLIMIT_NPROC counts processes per uid *per user namespace*: applied inside the
    sandbox's fresh namespace it bounds this run alone, though every run shares
    uid 65534 (outside a sandbox it would count all of the uid's processes).
    """
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        raise SandboxUnavailable("prlimit (util-linux) is not installed on this worker")
    memory = registered.memory_mb << 20
    out = [
        os.path.realpath(prlimit),
        f"--cpu={registered.cpu_s}",
        f"--as={memory}",
        f"--fsize={memory}",
        f"--nofile={NOFILE}",
        "--core=0",
    ]
    if per_sandbox_nproc:
        out.append(f"--nproc={registered.max_procs}")
    return [*out, "--"]


def spawn_kwargs() -> dict[str, Any]:
    # As root, drop to the sandbox uid *before* bwrap: a root bwrap's user
    # namespace would map the command's uid to real root on every bound file.
    if os.geteuid() == 0:
        return {
            "user": settings.COMMAND_SANDBOX_UID,
            "group": settings.COMMAND_SANDBOX_GID,
            "extra_groups": [],
        }
    return {}


def probe_sandbox(prefix: list[str]) -> None:
    """Run `true` in the sandbox once per worker process, so a kernel that refuses
    namespaces fails with bwrap's own words instead of as the command's exit 1."""
    key = tuple(prefix)
    if key in _sandbox_ok:
        return
    try:
        res = subprocess.run(  # noqa: S603 - fixed argv
            [*prefix, "/bin/true"],
            env=dict(BASE_ENV),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=15,
            **spawn_kwargs(),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"the bubblewrap sandbox cannot start here: {exc}") from None
    if res.returncode != 0:
        why = res.stderr.decode(errors="replace").strip()[-300:] or f"exit {res.returncode}"
        raise SandboxUnavailable(f"the bubblewrap sandbox cannot start here: {why}")
    _sandbox_ok.add(key)


# --- Egress (registrations with egress=True) --------------------------------
# The sandbox keeps its own network namespace with only loopback; the worker
# opens a listening socket *inside* that namespace (setns from a short-lived
# thread) and serves it as an HTTP proxy from its own network: every CONNECT or
# http:// request goes through the tenant's egress policy and the SSRF guard,
# exactly like an http target, and to the checked address only.

EGRESS_PORT = 3128
PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
CLONE_NEWNET = 0x40000000
MAX_HEAD = 16 * 1024
MAX_EGRESS_CONNECTIONS = 32


def egress_policy(tenant_id: Any) -> Any:
    from dispatch.targets import netguard

    if os.geteuid() != 0:
        raise SandboxUnavailable(
            "egress for managed commands needs a root worker (it opens the proxy inside "
            "the sandbox's network namespace)"
        )
    return netguard.AllowList.parse(Tenant.objects.get(pk=tenant_id).egress_allow or [])


def read_info(fd: int, timeout: float) -> int:
    """The sandbox's pid from bwrap's --info-fd JSON (EOF when bwrap is done writing)."""
    import json
    import select

    data = b""
    deadline = time.monotonic() + max(1.0, min(timeout, 30.0))
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise ValueError("bwrap did not report the sandbox in time")
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    if not data:
        raise ValueError("bwrap exited before the sandbox started")
    return int(json.loads(data)["child-pid"])


class EgressProxy:
    """An HTTP(S) proxy on 127.0.0.1:3128 of one sandbox, connecting out under `allow`."""

    def __init__(self, listener: socket.socket, allow: Any) -> None:
        self.listener = listener
        self.allow = allow
        self.closed = threading.Event()
        self.sockets: set[socket.socket] = {listener}
        self.lock = threading.Lock()
        threading.Thread(target=self._serve, name="egress-proxy", daemon=True).start()

    @classmethod
    def inside(cls, pid: int, allow: Any) -> EgressProxy:
        import ctypes

        result: dict[str, Any] = {}

        def enter() -> None:
            # setns changes only this thread, which ends right after; the socket
            # stays in the sandbox's namespace.
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
                try:
                    if libc.setns(fd, CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), "setns into the sandbox's network")
                finally:
                    os.close(fd)
                result["sock"] = socket.create_server(("127.0.0.1", EGRESS_PORT), backlog=32)
            except OSError as exc:
                result["error"] = exc

        thread = threading.Thread(target=enter, name="egress-setns")
        thread.start()
        thread.join()
        if "error" in result:
            raise result["error"]
        return cls(result["sock"], allow)

    def close(self) -> None:
        self.closed.set()
        with self.lock:
            for sock in self.sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()
            self.sockets.clear()

    def _track(self, sock: socket.socket) -> bool:
        with self.lock:
            # Each connection is a worker thread: a command gets a bounded number.
            if self.closed.is_set() or len(self.sockets) > 2 * MAX_EGRESS_CONNECTIONS:
                sock.close()
                return False
            self.sockets.add(sock)
            return True

    def _serve(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            if self._track(conn):
                threading.Thread(
                    target=self._handle, args=(conn,), name="egress-conn", daemon=True
                ).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(10)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(4096)
                if not chunk or len(head) > MAX_HEAD:
                    return
                head += chunk
            head, _, rest = head.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target, version = [*lines[0].split(" "), "", "", ""][:3]
            if method == "CONNECT":
                host, _, port_text = target.rpartition(":")
                host = host.strip("[]")
                upstream_head = b""
            else:
                url = urlsplit(target)
                if url.scheme != "http" or not url.hostname:
                    self._refuse(conn, 400, "only CONNECT and http:// requests")
                    return
                host, port_text = url.hostname, str(url.port or 80)
                path = (url.path or "/") + (f"?{url.query}" if url.query else "")
                kept = [
                    line
                    for line in lines[1:]
                    if not line.lower().startswith(("proxy-", "connection:"))
                ]
                upstream_head = (
                    "\r\n".join([f"{method} {path} {version}", *kept, "Connection: close"])
                    + "\r\n\r\n"
                ).encode("latin-1")
            if not port_text.isdigit() or not host:
                self._refuse(conn, 400, "bad proxy target")
                return
            upstream = self._connect(conn, host, int(port_text))
            if upstream is None:
                return
            if method == "CONNECT":
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            upstream.sendall(upstream_head + rest)
            self._pipe(conn, upstream)
        except OSError:
            return
        finally:
            with contextlib.suppress(OSError):
                conn.close()

    def _connect(self, conn: socket.socket, host: str, port: int) -> socket.socket | None:
        from dispatch.targets import netguard
        from dispatch.targets.http import resolve_checked

        try:
            addresses = resolve_checked(host, port, allow=self.allow, timeout=5)
        except netguard.Denied as denied:
            self._refuse(conn, 403, f"egress to {host}:{port} denied: {denied}")
            return None
        except OSError as exc:
            self._refuse(conn, 502, f"cannot resolve {host}: {exc}")
            return None
        for family, address in addresses:
            upstream = socket.socket(family, socket.SOCK_STREAM)
            upstream.settimeout(10)
            try:
                upstream.connect((address, port))
            except OSError:
                upstream.close()
                continue
            if self._track(upstream):
                return upstream
            return None
        self._refuse(conn, 502, f"cannot connect to {host}:{port}")
        return None

    def _refuse(self, conn: socket.socket, status: int, why: str) -> None:
        body = (why + "\n").encode()
        conn.sendall(
            f"HTTP/1.1 {status} Refused\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        import selectors

        a.settimeout(None)
        b.settimeout(None)
        with selectors.DefaultSelector() as sel:
            sel.register(a, selectors.EVENT_READ, b)
            sel.register(b, selectors.EVENT_READ, a)
            while not self.closed.is_set():
                for key, _ in sel.select(timeout=1):
                    src: socket.socket = key.fileobj  # type: ignore[assignment]
                    data = src.recv(64 * 1024)
                    if not data:
                        return
                    key.data.sendall(data)
