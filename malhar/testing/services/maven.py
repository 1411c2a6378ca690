"""Fetch the official Apache jars (Kafka, Hadoop, Spark's Kafka connector) with Maven.

Each jar set is a small ``pom.xml`` shipped in ``malhar/testing/maven/<name>/``.
``mvn dependency:copy-dependencies`` copies the set into the cache once; the
folder name carries a hash of the pom, so editing a version fetches anew and
a half-finished copy is never taken for a complete one.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from importlib import resources
from pathlib import Path

from malhar.testing.services.errors import ServiceError
from malhar.testing.services.paths import cache_dir
from malhar.testing.services.process import run_step

_DONE = ".complete"


def jar_sets() -> list[str]:
    """Names of the jar sets shipped with malhar (one folder with a pom.xml each)."""
    root = Path(str(resources.files("malhar.testing") / "maven"))
    return sorted(p.parent.name for p in root.glob("*/pom.xml"))


def pom_path(name: str) -> Path:
    path = Path(str(resources.files("malhar.testing") / "maven" / name / "pom.xml"))
    if not path.exists():
        raise ValueError(f"unknown jar set {name!r}: no {path}")
    return path


def jar_dir(name: str, *, timeout: float = 1200.0) -> Path:
    """The folder holding jar set ``name``, fetched on first use."""
    pom = pom_path(name)
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:12]
    target = cache_dir() / "jars" / f"{name}-{digest}"
    if (target / _DONE).exists():
        return target
    mvn = shutil.which("mvn")
    if not mvn:
        raise ServiceError(
            f"maven ({name})",
            "Maven is needed to fetch the official jars and `mvn` is not on PATH",
            hint="apt-get install -y maven (or run `make setup`)",
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    log_path = target.parent / f"{name}-{digest}.mvn.log"
    command = [
        mvn,
        "-B",
        "--global-settings",
        str(pom.parent.parent / "settings.xml"),
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={staging}",
    ]
    try:
        run_step(
            f"maven ({name})",
            "fetching jars",
            command,
            log_path,
            timeout=timeout,
            hint="check that Maven Central is reachable (proxy settings in ~/.m2/settings.xml), "
            "or set MALHAR_CACHE_DIR to a filled cache",
        )
    except ServiceError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    (staging / _DONE).write_text("ok\n")
    if target.exists():  # another process finished first
        shutil.rmtree(staging, ignore_errors=True)
    else:
        staging.rename(target)
    return target


def classpath(name: str, *extra: Path | str) -> str:
    """A Java classpath of jar set ``name`` (plus ``extra`` entries first)."""
    folder = jar_dir(name)
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    return ":".join([*(str(e) for e in extra), *jars])


def jars(name: str) -> list[Path]:
    """The jar files of set ``name`` (for ``spark.jars``)."""
    return sorted(jar_dir(name).glob("*.jar"))
