"""A real Docker daemon for the platform tests: Debian's ``docker.io`` (``dockerd``) started by the
test session in a temporary folder (its socket, data and state there; vfs storage, no iptables,
no bridge), never the machine's own daemon.

No image can be pulled: :meth:`Daemon.image` imports one from a tar that holds only the layout of
a Debian-like root (the merged-/usr symbolic links, empty /tmp, /root, /etc ...); every container
binds this machine's system (``/usr``, the ``/bin`` and ``/lib`` folders that are not links, the
pieces of ``/etc`` a grader reads), its Python and the suite's virtual environment **read-only**.
Containers run with Docker's defaults (its seccomp profile, its capabilities, no ``--privileged``)
and no network, plus what a test adds to say how the platform runs them (``--user``,
``--cap-drop ALL``, ``no-new-privileges``, ``--memory``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

DOCKERD = "dockerd"
IMAGE = "awb-platform:layout"
ETC = ("passwd", "group", "nsswitch.conf", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime",
       "alternatives", "ssl", "fonts", "mime.types")
PYTHON = os.path.realpath(sys.base_prefix)          # the venv's interpreter lives here
VENV = os.path.realpath(sys.prefix)


class Unavailable(RuntimeError):
    """dockerd cannot run here (the reason is the message)."""


class Daemon:
    def __init__(self):
        if not shutil.which(DOCKERD) or not shutil.which("docker"):
            raise Unavailable("dockerd is not installed (apt-get install docker.io)")
        if os.geteuid() != 0:
            raise Unavailable("dockerd needs root")
        self.dir = Path(tempfile.mkdtemp(prefix="awb-dk-", dir="/tmp"))
        self.sock = self.dir / "docker.sock"
        self.env = {**os.environ, "DOCKER_HOST": f"unix://{self.sock}"}
        self.log = open(self.dir / "dockerd.log", "wb")
        self.proc = subprocess.Popen(
            [DOCKERD, "-H", f"unix://{self.sock}", "--data-root", str(self.dir / "data"), "--exec-root",
             str(self.dir / "exec"), "--pidfile", str(self.dir / "dockerd.pid"), "--storage-driver=vfs",
             "--iptables=false", "--ip6tables=false", "--bridge=none"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                break
            if self.sock.exists() and self.docker("version", check=False).returncode == 0:
                self.image()
                return
            time.sleep(0.5)
        tail = (self.dir / "dockerd.log").read_text(errors="replace").strip().splitlines()[-3:]
        self.stop()
        raise Unavailable("dockerd did not start: " + " | ".join(tail))

    def docker(self, *args, check=True, timeout=600, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", *args], env=self.env, capture_output=True, text=True, check=check,
                              timeout=timeout, **kw)

    def image(self) -> None:
        layout = self.dir / "layout.tar"
        with tarfile.open(layout, "w") as tar:
            for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
                if os.path.islink(f"/{name}"):
                    info = tarfile.TarInfo(name)
                    info.type, info.linkname = tarfile.SYMTYPE, os.readlink(f"/{name}")
                    tar.addfile(info)
            for name, mode in (("tmp", 0o1777), ("root", 0o755), ("etc", 0o755), ("home", 0o755), ("var", 0o755)):
                info = tarfile.TarInfo(name)
                info.type, info.mode = tarfile.DIRTYPE, mode
                tar.addfile(info)
        self.docker("import", str(layout), IMAGE)

    def binds(self) -> list[str]:
        """The read-only system, Python and virtual environment every container gets."""
        out = ["-v", "/usr:/usr:ro"]
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            if os.path.isdir(f"/{name}") and not os.path.islink(f"/{name}"):
                out += ["-v", f"/{name}:/{name}:ro"]
        for name in ETC:
            if os.path.exists(f"/etc/{name}"):
                out += ["-v", f"/etc/{name}:/etc/{name}:ro"]
        for p in dict.fromkeys((PYTHON, VENV)):
            out += ["-v", f"{p}:{p}:ro"]
        return out

    def _run_args(self, args: list[str], command: list[str]) -> list[str]:
        return ["run", "--rm", "--network", "none", *self.binds(),
                "-e", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "-e", "LANG=C.UTF-8",
                "-e", "MPLBACKEND=Agg", "-e", "OMP_NUM_THREADS=1", *args, IMAGE, *command]

    def start(self, args: list[str], command: list[str]) -> str:
        """``docker run --detach``: the container's id (``docker rm -f`` it, :meth:`remove`)."""
        full = self._run_args(args, command)
        return self.docker(full[0], "--detach", *full[1:]).stdout.strip()

    def remove(self, container: str) -> None:
        self.docker("rm", "-f", container, check=False)

    def run(self, args: list[str], command: list[str], timeout: float = 900) -> dict:
        """``docker run`` of ``command`` in a new container (removed after); {rc, seconds, stdout}."""
        t0 = time.perf_counter()
        full = self._run_args(args, command)
        try:
            r = self.docker(*full, check=False, timeout=timeout)
            rc, out = r.returncode, r.stdout + r.stderr
        except subprocess.TimeoutExpired as e:
            rc, out = 124, f"timed out after {timeout} s: {e.stdout or ''}"
        return {"rc": rc, "seconds": time.perf_counter() - t0, "stdout": out}

    def gradescope_setup(self, zip_path: Path, root: Path) -> dict:
        """An autograder zip installed in ``root`` (bound as ``/autograder``) as Gradescope's image build
        does: unpacked into ``source/``, ``setup.sh`` run in a container (with this environment:
        ``AWB_SETUP_VENV``), ``run_autograder`` copied to the root; setup.sh's {rc, seconds, stdout}."""
        import zipfile

        (root / "source").mkdir(parents=True)
        with zipfile.ZipFile(zip_path) as zf:
            zf.extractall(root / "source")
        for p in ("setup.sh", "run_autograder"):
            (root / "source" / p).chmod(0o755)
        setup = self.run(["-v", f"{root}:/autograder", "-e", f"AWB_SETUP_VENV={VENV}"],
                         ["bash", "/autograder/source/setup.sh"])
        shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")
        return setup

    def stop(self) -> None:
        if self.proc.poll() is None:
            ids = self.docker("ps", "-aq", check=False).stdout.split() if self.sock.exists() else []
            if ids:
                self.docker("rm", "-f", *ids, check=False)
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
