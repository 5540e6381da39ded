#!/usr/bin/env python3
"""Renders `strata report` in headless Chromium and checks that every plot is drawn.

Usage: python3 tests/track/check_report.py build/strata SOURCE_DIR
Trains 8 steps of configs/tiny.toml (small overrides, synthetic data, profiler on) in one process,
writes RUN_DIR/report.html with `strata report`, then
  1. loads it in headless Chromium (`--dump-dom`: the DOM as the browser built it) and checks that
     each of the eight plots is an <svg> whose series are <path> elements with at least two
     points each (loss with val_loss, memory and step time with several categories);
  2. takes a screenshot and checks, pixel by pixel, that the loss and val_loss colours are on it
     (the browser really drew the curves) and that the image is not blank;
  3. writes a mixture-of-experts run's metrics.jsonl (2 MoE layers of 4 experts, 150 steps, one
     layer collapsing onto one expert), reports it and checks in the DOM that each expert-load
     heat map has its 75 x 4 cells, the collapsed expert's in the darkest red.
Needs Debian's `chromium` (scripts/install_deps.sh); exits 77 (ctest: skipped) without it, or 1
(failed) when CI is set.
Registered in ctest (tests/CMakeLists.txt).
"""
import html.parser
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

PLOTS = {  # plot id -> minimum number of drawn series
    "loss": 2, "lr": 1, "grad_norm": 1, "throughput": 1, "mfu": 1, "memory": 3, "time": 3,
    "comm_share": 1,
}


def chromium_binary():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def chromium(binary, *args, timeout=180):
    cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--no-first-run", "--hide-scrollbars", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


class PlotParser(html.parser.HTMLParser):
    """Collects, per <svg class="plot">, the number of points of each <path class="series">."""

    def __init__(self):
        super().__init__()
        self.plots = {}
        self.current = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg" and "plot" in (a.get("class") or "").split():
            self.current = a.get("data-plot")
            self.plots[self.current] = []
        elif tag == "path" and self.current and "series" in (a.get("class") or "").split():
            points = re.findall(r"[ML]\s*-?[\d.]+\s*,\s*-?[\d.]+", a.get("d") or "")
            self.plots[self.current].append(len(points))

    def handle_endtag(self, tag):
        if tag == "svg":
            self.current = None


class HeatMapParser(html.parser.HTMLParser):
    """Collects, per <svg class="heatmap">, the fill of each <rect class="cell">."""

    def __init__(self):
        super().__init__()
        self.maps = {}
        self.current = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg" and "heatmap" in (a.get("class") or "").split():
            self.current = a.get("data-heatmap")
            self.maps[self.current] = []
        elif tag == "rect" and self.current and "cell" in (a.get("class") or "").split():
            self.maps[self.current].append(a.get("fill"))

    def handle_endtag(self, tag):
        if tag == "svg":
            self.current = None


def check_moe_heat_map(strata, binary, work):
    run = os.path.join(work, "moe_run")
    os.makedirs(run)
    with open(os.path.join(run, "metrics.jsonl"), "w") as f:
        for step in range(1, 151):
            layer1 = [0, 0, 128, 0] if step > 100 else [32, 32, 32, 32]
            f.write(json.dumps({"step": step, "loss": 5.0, "moe": {
                "aux_loss": 0.04, "z_loss": 0.0, "dropped": 0,
                "tokens_per_expert": [[32, 32, 32, 32], layer1]}}) + "\n")
    subprocess.run([strata, "report", run], check=True, capture_output=True, text=True)
    dom = chromium(binary, "--dump-dom", "file://" + os.path.join(run, "report.html"))
    assert dom.returncode == 0 and "</html>" in dom.stdout, dom.stderr[-2000:]
    parser = HeatMapParser()
    parser.feed(dom.stdout)
    cells = {k: len(v) for k, v in parser.maps.items()}
    assert cells == {"moe-layer-0": 300, "moe-layer-1": 300}, f"heat map cells {cells}"
    collapsed = parser.maps["moe-layer-1"][50 * 4 + 2::4]  # expert 2 from column 50 (step 101) on
    assert collapsed == ["#b2182b"] * 25, f"collapsed expert's cells {collapsed}"
    return cells


def read_png(path):
    """(width, height, rows of RGB(A) bytes) of an 8-bit RGB or RGBA PNG, unfiltered."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6), f"PNG depth {depth} colour type {color}"
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(channels, stride):
                line[i] = (line[i] + line[i - channels]) & 255
        elif f == 2:
            for i in range(stride):
                line[i] = (line[i] + prev[i]) & 255
        elif f == 3:
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif f == 4:
            for i in range(stride):
                a = line[i - channels] if i >= channels else 0
                b = prev[i]
                c = prev[i - channels] if i >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 255
        rows.append(line)
        prev = line
    return width, height, channels, rows


def skip(reason):
    """A missing dependency: skipped outside CI (exit 77, the reason printed), failed under CI."""
    if os.environ.get("CI"):
        print("FAILED (CI is set, so this is not a skip): " + reason)
        sys.exit(1)
    print("SKIP: " + reason)
    sys.exit(77)


def main():
    strata, src = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    binary = chromium_binary()
    if not binary:
        skip("no chromium (apt-get install chromium; scripts/install_deps.sh does)")
    work = tempfile.mkdtemp(prefix="strata_report_")
    try:
        run = os.path.join(work, "run")
        sets = ["model.n_layer=1", "model.d_model=32", "model.n_head=2", "model.vocab_size=300",
                "model.max_seq_len=32", "train.seq_len=32", "train.batch_size=2", "train.steps=8",
                "train.eval_every=2", "train.eval_batches=1", "train.checkpoint_every=0",
                "data.source=synthetic", "sample.max_new_tokens=0", "optim.warmup_steps=2",
                "profile.enabled=true", "profile.start_step=2", "profile.steps=2",
                f"run.dir={run}"]
        cmd = [strata, "train", os.path.join(src, "configs/tiny.toml")]
        for s in sets:
            cmd += ["--set", s]
        subprocess.run(cmd, check=True, capture_output=True, timeout=240,
                       env=dict(os.environ, OMP_NUM_THREADS="2"))
        out = subprocess.run([strata, "report", run], check=True, capture_output=True, text=True)
        page = os.path.join(run, "report.html")
        assert page in out.stdout and os.path.exists(page), out.stdout
        text = open(page).read()
        assert "<script" not in text and "http://" not in text.replace(
            'xmlns="http://www.w3.org/2000/svg"', ""), "the page must be self-contained"
        assert "trace/trace.json" in text, "the profiled run's trace is linked"

        # 1. The DOM Chromium built.
        dom = chromium(binary, "--dump-dom", "file://" + page)
        assert dom.returncode == 0 and "</html>" in dom.stdout, dom.stderr[-2000:]
        parser = PlotParser()
        parser.feed(dom.stdout)
        problems = []
        for plot, want in PLOTS.items():
            drawn = parser.plots.get(plot)
            if drawn is None:
                problems.append(f"{plot}: no <svg> in the DOM")
            elif sum(1 for n in drawn if n >= 2) < want:
                problems.append(f"{plot}: series points {drawn}, want {want} series of >= 2")
        assert not problems, "; ".join(problems)

        # 2. The pixels: the loss (#1f77b4) and val_loss (#ff7f0e) curves are on the screenshot.
        png = os.path.join(work, "report.png")
        shot = chromium(binary, "--window-size=720,1500", f"--screenshot={png}", "file://" + page)
        assert os.path.exists(png), shot.stderr[-2000:]
        width, height, ch, rows = read_png(png)
        want = {(0x1f, 0x77, 0xb4): 0, (0xff, 0x7f, 0x0e): 0}
        colours = set()
        for line in rows:
            for x in range(0, width * ch, ch):
                px = (line[x], line[x + 1], line[x + 2])
                colours.add(px)
                for c in want:
                    if all(abs(px[k] - c[k]) <= 24 for k in range(3)):
                        want[c] += 1
        assert len(colours) > 16, f"the screenshot looks blank ({len(colours)} colours)"
        assert all(n >= 30 for n in want.values()), f"curve pixels found: {want}"
        # 3. A MoE run's expert-load heat maps.
        cells = check_moe_heat_map(strata, binary, work)
        print(f"report drawn: {sorted((k, len(v)) for k, v in parser.plots.items())}; "
              f"screenshot {width}x{height}, {len(colours)} colours, curve pixels {list(want.values())}; "
              f"MoE heat map cells {cells}")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
