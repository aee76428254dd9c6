"""A RuntimeWarning fails the test that raised it: the suite's own pytest configuration
(pyproject.toml's [tool.pytest.ini_options]) is run over tests that trigger numpy's, and over one
that does not."""

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

SAMPLES = '''
import numpy as np


def test_division_by_zero():
    np.float64(1.0) / np.float64(0.0)


def test_nan_from_a_subtraction():
    np.subtract(np.inf, np.inf)


def test_overflow():
    np.float64(1e300) * np.float64(1e300)


def test_clean_arithmetic():
    assert np.float64(1.0) / np.float64(4.0) == 0.25
'''


def test_a_numpy_runtime_warning_fails_the_test_and_clean_arithmetic_passes(tmp_path: Path) -> None:
    (tmp_path / "test_samples.py").write_text(SAMPLES, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfE", "-c", str(REPO_ROOT / "pyproject.toml"),
         "--rootdir", str(tmp_path), "-p", "no:cacheprovider", "test_samples.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "3 failed, 1 passed" in output
    for name in ("test_division_by_zero", "test_nan_from_a_subtraction", "test_overflow"):
        assert f"FAILED test_samples.py::{name} - RuntimeWarning" in output
