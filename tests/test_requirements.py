"""requirements.txt and environment.yml list the same packages with the same ranges, and
Colab's preinstalled versions of the notebook packages satisfy them (nothing reinstalled)."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _req_lines():
    out = []
    for line in (REPO / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


def _env_pip_lines():
    text = (REPO / "environment.yml").read_text()
    pip_block = text.split("- pip:", 1)[1]
    return [m.group(1).strip() for m in re.finditer(r"^\s+-\s+(\S.*)$", pip_block, re.M)]


def test_ci_installs_the_browser_the_browser_test_drives():
    ci = (REPO / ".ci" / "run").read_text()
    assert "apt-get install" in ci and "chromium" in ci and "AWB_REQUIRE_BROWSER=1" in ci
    assert any(_parse(line)[0] == "playwright" for line in _req_lines())


def _parse(spec):
    name = re.match(r"[A-Za-z0-9_.-]+", spec).group(0).lower()
    return name, spec[len(name):]


def test_requirements_and_environment_agree():
    assert sorted(map(_parse, _req_lines())) == sorted(map(_parse, _env_pip_lines()))


def _satisfies(version, spec):
    def key(v):
        return tuple(int(x) for x in re.findall(r"\d+", v)[:3])

    for clause in spec.split(","):
        op, v = re.match(r"(>=|<=|==|<|>)(.+)", clause.strip()).groups()
        a, b = key(version), key(v)
        ok = {">=": a >= b, "<=": a <= b, "==": a == b, "<": a < b, ">": a > b}[op]
        if not ok:
            return False
    return True


def test_colab_preinstalled_versions_satisfy_ranges():
    # What Colab shipped in 2025 (oldest we support) and what it may ship next.
    colab = {"torch": ["2.6.0", "2.8.0", "2.9.0"], "numpy": ["1.26.4", "2.0.2"],
             "matplotlib": ["3.10.0"], "ipywidgets": ["7.7.1"], "tqdm": ["4.67.1"]}
    specs = dict(map(_parse, _req_lines()))
    for pkg, versions in colab.items():
        for v in versions:
            assert _satisfies(v, specs[pkg]), f"Colab's {pkg} {v} does not satisfy {specs[pkg]}"
