"""`attest ask` on a terminal 80 columns wide, against the six real services with the embedded
engine: what is left on the screen is the answer, within 80 cells, with footnotes and their
sources, and no progress line; the exit status tells an answer from a fallback."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

import pytest
from rich.cells import cell_len

from gateway.launcher import REPO_ROOT
from tests.integration.conftest import TEST_TOKEN

pytestmark = pytest.mark.integration
COLUMNS = 80
QUESTION = "order-service 最近半小时报错很多，是数据库连接池的问题吗？"
_CONTROL = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])|\x1b\][^\x07]*\x07|\x1b.")


def _env(cluster) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if key not in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR", "ATTEST_AUTH_TOKEN")}
    # This tree's generated code first, as the launcher gives it to every service.
    path = [str(REPO_ROOT / "gen"), str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env.update({"ATTEST_GATEWAY_ADDR": cluster.gateway_addr, "ATTEST_AUTH_TOKEN": TEST_TOKEN, "TERM": "xterm-256color",
                "PYTHONPATH": os.pathsep.join(path)})
    return env


def _on_a_terminal(cluster, *args: str) -> tuple[int, str]:
    """Run `attest` with a pseudo-terminal of COLUMNS columns as stdin, stdout and stderr; its exit
    status and everything it wrote."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, COLUMNS, 0, 0))
    child = subprocess.Popen([sys.executable, "-m", "gateway.cli", *args], cwd=REPO_ROOT, env=_env(cluster),
                             stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if child.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        code = child.wait(timeout=30)
    finally:
        os.close(master)
        if child.poll() is None:
            child.kill()
    return code, b"".join(chunks).decode("utf-8", errors="replace")


def _screen(output: str) -> list[str]:
    """What a terminal shows after `output`, lines not wrapped (a line wider than the terminal stays
    one wider line here): carriage return, line feed, cursor up and down, erase in line and in
    display; styles and modes ignored."""
    rows: list[list[str]] = [[]]
    row = col = 0
    position = 0
    while position < len(output):
        control = _CONTROL.match(output, position)
        if control:
            params, final = control.group(1) or "", control.group(2)
            count = int(params) if params.isdigit() else 1
            if final == "A":
                row = max(row - count, 0)
            elif final == "B":
                row += count
            elif final == "G":
                col = count - 1
            elif final == "K":
                line = rows[row]
                rows[row] = [] if params == "2" else line[:col] if params in ("", "0") else [" "] * col + line[col:]
            elif final == "J" and params in ("", "0"):
                rows[row] = rows[row][:col]
                del rows[row + 1:]
            position = control.end()
            continue
        char = output[position]
        position += 1
        if char == "\r":
            col = 0
        elif char == "\n":
            row += 1
        elif char >= " ":
            while len(rows) <= row:
                rows.append([])
            line = rows[row]
            line.extend(" " * (col - len(line)))
            cells = [char] + [""] * (cell_len(char) - 1)  # a wide character fills two cells
            line[col:col + len(cells)] = cells
            col += len(cells)
        while len(rows) <= row:
            rows.append([])
    lines = ["".join(line).rstrip() for line in rows]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def test_ask_on_an_80_column_terminal_reads_well(cluster):
    code, output = _on_a_terminal(cluster, "ask", QUESTION)
    screen = _screen(output)
    shown = "\n".join(screen)
    assert code == 0, shown
    assert "正在诊断" in output, "progress was shown while the run went on"
    assert not [line for line in screen if "正在诊断" in line or line.startswith("· ")], shown
    too_wide = [line for line in screen if cell_len(line) > COLUMNS]
    assert not too_wide, too_wide
    assert sum("可信度" in line for line in screen) == 1, shown
    assert re.search(r"\[1\]", "\n".join(screen[:screen.index("【引用来源】")])), "footnote markers in the text"
    sources = screen[screen.index("【引用来源】") + 1:]
    assert sources[0].startswith("[1] query_"), shown
    assert re.search(r"^\[\d+\] query_logs #\d+ · 服务 order-service，级别 ", "\n".join(sources), re.M), shown
    assert "[证据:" not in shown
    run_line = next(line for line in screen if line.startswith("run id: "))
    assert re.fullmatch(r"run id: [0-9a-f]{32} · rounds: \d+", run_line), "the run id whole, on one line"


def test_ask_exits_3_on_a_fallback_and_prints_no_progress_into_a_pipe(cluster):
    done = subprocess.run([sys.executable, "-m", "gateway.cli", "ask", "系统最近是不是有点慢？"], cwd=REPO_ROOT,
                          env=_env(cluster), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "MISSING_REQUIRED_CONTEXT" in done.stdout and "可信度：无" in done.stdout
    assert "· #" not in done.stdout and "正在诊断" not in done.stdout
