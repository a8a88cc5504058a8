#!/usr/bin/env python3
"""Installs and checks the exactly pinned Python packages the tests and the test data use.

    scripts/pins.py install REQ            pip install --no-deps -r REQ into this python3,
                                           then check
    scripts/pins.py check REQ [--path DIR] check that every package REQ pins is installed
                                           (in DIR: a `pip install --target` folder) at
                                           its pinned version, and that every dependency of
                                           those packages is pinned too

REQ holds one `name==version` a line (`#` comments). Installing with --no-deps from a list
that pins the whole closure means nothing floats: what is installed is what the list says,
on every machine, whatever pip would resolve today. The check catches a list that misses a
dependency and an environment whose packages were changed by hand.
scripts/export-onnx-1-23-node-tests.py uses install_target() for its own set.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import re
import shutil
import subprocess
import sys

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)$")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(req: str) -> dict[str, tuple[str, str]]:
    """normalized name -> (name, version) for each `name==version` line of `req`."""
    pins: dict[str, tuple[str, str]] = {}
    with open(req) as f:
        for n, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            m = PIN.match(line)
            if not m:
                sys.exit(f"{req}:{n}: '{line}' is not an exact pin (name==version)")
            pins[normalize(m.group(1))] = (m.group(1), m.group(2))
    return pins


def fingerprint(req: str) -> str:
    """The pinned set of `req`, one `name==version` a line, sorted: what a cache made from it
    records, so a cache made from another set is told apart."""
    pins = read_pins(req)
    return "".join(f"{pins[k][0]}=={pins[k][1]}\n" for k in sorted(pins))


def digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _requirement_ok(req: str, installed: dict[str, str]) -> str | None:
    """None when requirement string `req` (from a package's metadata) is met by the pinned
    set `installed` (normalized name -> version), else what is wrong."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # no packaging here: check the names only, skipping extras
        name_part, _, marker = req.partition(";")
        if "extra" in marker:
            return None
        name = normalize(re.match(r"[A-Za-z0-9._-]+", name_part.strip()).group(0))
        return None if name in installed else f"needs {req.strip()}, which is not pinned"
    r = Requirement(req)
    if r.marker is not None and not r.marker.evaluate({"extra": ""}):
        return None
    have = installed.get(normalize(r.name))
    if have is None:
        return f"needs {req}, which is not pinned"
    if r.specifier and not r.specifier.contains(have, prereleases=True):
        return f"needs {req}, but {r.name}=={have} is pinned"
    return None


def check(req: str, path: str | None = None) -> list[str]:
    """What is wrong with the installed packages against the pins of `req` (empty: nothing).
    With `path`, the packages installed in that folder (`pip install --target`)."""
    pins = read_pins(req)
    found: dict[str, md.Distribution] = {}
    for dist in md.distributions(path=[path]) if path else md.distributions():
        name = normalize(dist.metadata["Name"] or "")
        found.setdefault(name, dist)  # the first on the path is the one imported
    problems = []
    where = f" in {path}" if path else ""
    for key, (name, version) in sorted(pins.items()):
        dist = found.get(key)
        if dist is None:
            problems.append(f"{name}=={version} is not installed{where}")
        elif dist.version != version:
            problems.append(f"{name} is {dist.version}{where}, pinned {version}")
    installed = {k: v for k, (_, v) in pins.items()}
    for key, (name, _) in sorted(pins.items()):
        dist = found.get(key)
        for r in (dist.requires or []) if dist else []:
            bad = _requirement_ok(r, installed)
            if bad:
                problems.append(f"{name} {bad} ({req})")
    return problems


def pip(*args: str) -> None:
    subprocess.check_call(
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", *args]
    )


def install(req: str) -> None:
    pip("-r", req)
    problems = check(req)
    if problems:
        sys.exit(f"{req}: after installing:\n  " + "\n  ".join(problems))


def install_target(req: str, target: str) -> None:
    """Makes `target` hold exactly the pinned set of `req` (pip install --target). A folder
    made from another set (or by hand, or half made) is removed and made again; the set it
    was made from is recorded in target/.pins."""
    stamp = os.path.join(target, ".pins")
    want = fingerprint(req)
    if os.path.exists(stamp) and open(stamp).read() == want and not check(req, target):
        return
    if os.path.exists(target):
        print(f"{target}: not made from the pins of {req}; making it again", flush=True)
        shutil.rmtree(target)
    pip("--no-cache-dir", "--target", target, "-r", req)
    problems = check(req, target)
    if problems:
        sys.exit(f"{target}: after installing {req}:\n  " + "\n  ".join(problems))
    with open(stamp, "w") as f:
        f.write(want)


def main() -> None:
    args = sys.argv[1:]
    if len(args) == 2 and args[0] == "install":
        install(args[1])
    elif len(args) in (2, 4) and args[0] == "check":
        path = None
        if len(args) == 4:
            if args[2] != "--path":
                sys.exit(__doc__)
            path = args[3]
        problems = check(args[1], path)
        if problems:
            sys.exit("\n".join(problems))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
