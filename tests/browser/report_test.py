#!/usr/bin/env python3
"""tlc report in a real browser: Debian's Chromium, headless, driven over the DevTools
protocol (a pipe, no network), opens the page from disk and checks it.

    report_test.py <tlc> <chromium> <model.tl> <work dir>

Fails on any console error, uncaught exception or resource that does not load; checks
through the DOM that every level has its graph, kernels, timeline and pass stepper with
the counts the Programs themselves give (tlc --emit=program), that every kernel of every
level is reached by selecting the ops of its graph, and that the roofline has a point
per kernel; saves a screenshot of O2 with an op selected (<work dir>/report.png). Then
the same checks for the report with --persistent (O3 one persistent kernel, its tasks on
the timeline), whose O3 must say that measured task times need a GPU.

The model is given to tlc as a path relative to the folder above its own (models/x.tl),
as a reader would type it: the page shows that command.
"""
import base64
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time

LEVELS = 4


class Chromium:
    """A headless Chromium and one page of it, spoken to with JSON messages on a pipe."""

    def __init__(self, binary, profile):
        to_browser, self._send = self._pipe()
        self._receive, from_browser = self._pipe()

        def as_fds_3_and_4():  # --remote-debugging-pipe reads fd 3, writes fd 4
            os.dup2(to_browser, 3)
            os.dup2(from_browser, 4)

        self.process = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions", "--user-data-dir=" + profile, "about:blank"],
            preexec_fn=as_fds_3_and_4, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self._next_id = 0
        self._buffer = b""
        self.events = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]

    @staticmethod
    def _pipe():
        # Both ends above fd 10, so moving one to fd 3 or 4 in the child never clobbers the other.
        read, write = os.pipe()
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (read, write)]
        os.close(read)
        os.close(write)
        return moved

    def _message(self):
        while b"\0" not in self._buffer:
            chunk = os.read(self._receive, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buffer += chunk
        text, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(text)

    def call(self, method, params=None, session=None):
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._send, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._message()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def page(self, method, params=None):
        return self.call(method, params, self.session)

    def wait_for(self, event, seconds=30):
        deadline = time.time() + seconds
        while time.time() < deadline:
            for i, message in enumerate(self.events):
                if message.get("method") == event:
                    return self.events.pop(i)
            self.events.append(self._message())
        raise RuntimeError(f"no {event} within {seconds} s")

    def evaluate(self, expression):
        result = self.page("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def close(self):
        self.process.kill()
        self.process.wait()


def problems(events):
    """Console errors, exceptions and failed loads among the page's events."""
    found = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            found.append("console error: " + " ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
        elif method == "Runtime.exceptionThrown":
            found.append("exception: " + json.dumps(params["exceptionDetails"])[:500])
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            found.append("log error: " + params["entry"]["text"] + " " + params["entry"].get("url", ""))
        elif method == "Network.loadingFailed":
            found.append("failed to load: " + params.get("errorText", "") + " " + params.get("requestId", ""))
    return found


def expected_counts(tlc, model, work, persistent):
    """What the Programs say each level has: distinct kernels (a persistent kernel's parts
    in its place), the timeline's bars (its launches, or a persistent kernel's tasks),
    passes, roofline points, and the model ops the graph draws (those of block 0 and
    outside the blocks)."""
    levels = []
    for level in range(LEVELS):
        out = os.path.join(work, f"program-O{level}{'-persistent' if persistent else ''}.json")
        flags = ["--persistent"] if persistent and level == LEVELS - 1 else []
        subprocess.run([tlc, model, f"-O{level}", "--emit=program", "-o", out] + flags, check=True)
        program = json.load(open(out))
        kernels, bars, persistents = [], 0, 0
        for kernel in program["kernels"]:
            parts = kernel.get("persistent", {}).get("parts", [])
            kernels += parts or [kernel]
            bars += len(kernel["persistent"]["tasks"]) if parts else 1
            persistents += bool(parts)
        shown = {op for k in kernels if k["layer"] <= 0 for op, role in k.get("origins", []) if role == "computes"}
        distinct = {k.get("entry", k["name"]): k for k in kernels}
        timed = 0 if persistents else sum(1 for k in distinct.values() if k["min_bytes"] > 0)
        levels.append({"kernels": len(distinct), "launches": bars, "steps": len(program["pipeline"].split(", ")) + 1,
                       "ops": len(shown), "points": timed + persistents})
    return levels


def check(condition, message, failures):
    if not condition:
        failures.append(message)


def make_site(tlc, model, work, name, flags, failures):
    """tlc report into <work>/<name>, from the folder above the model's (models/x.tl)."""
    site = os.path.join(work, name)
    root = os.path.dirname(os.path.dirname(os.path.abspath(model)))
    started = time.time()
    subprocess.run([tlc, "report", os.path.relpath(os.path.abspath(model), root), "-o", site, "--target=cpu"] + flags,
                   check=True, cwd=root)
    print(" ".join(["tlc report"] + flags), f"took {time.time() - started:.1f} s")
    size = sum(os.path.getsize(os.path.join(site, f)) for f in os.listdir(site))
    print(f"the site: {sorted(os.listdir(site))}, {size / 2**20:.2f} MiB")
    check(size < 10 * 2**20, f"{name}: the site is {size} bytes, over 10 MiB", failures)
    return site


def check_site(browser, site, expected, failures):
    """Opens the site and checks every level's views, the roofline and the fusion tables."""
    browser.page("Page.navigate", {"url": "file://" + os.path.abspath(os.path.join(site, "index.html"))})
    browser.wait_for("Page.loadEventFired")
    for level, want in enumerate(expected):
        got = browser.evaluate(f"""(() => {{
            const s = document.getElementById('O{level}');
            return {{nodes: s.querySelectorAll('.graph g.node').length,
                    opNodes: s.querySelectorAll('.graph g.node[id^="O{level}-op"]').length,
                    articles: s.querySelectorAll('article.kernel').length,
                    rows: s.querySelectorAll('table.kernels tr[data-kernel]').length,
                    launches: [...s.querySelectorAll('rect.launch')].reduce((n, r) => n + +(r.dataset.tasks || 1), 0),
                    steps: s.querySelectorAll('article.step').length,
                    options: s.querySelectorAll('.stepper option').length}};
        }})()""")
        print(f"O{level}: {got} (the Program: {want})")
        check(got["opNodes"] == want["ops"], f"O{level}: {got['opNodes']} ops drawn, {want['ops']} computed", failures)
        check(got["nodes"] == want["ops"] + 1, f"O{level}: the other blocks' node is missing", failures)
        for key, what in (("articles", "kernels"), ("rows", "kernels"), ("launches", "launches"),
                          ("steps", "steps"), ("options", "steps")):
            check(got[key] == want[what], f"O{level}: {got[key]} {key}, expected {want[what]}", failures)
        # Selecting each op of the graph (its link) shows a kernel; together they show every kernel.
        reached = browser.evaluate(f"""(() => {{
            const shown = new Set();
            for (const link of document.querySelectorAll('#O{level} .graph a')) {{
              const href = link.getAttribute('href') || link.getAttribute('xlink:href');
              if (!href || !href.includes('/op')) continue;
              show(href);
              const open = [...document.querySelectorAll('#O{level} article.kernel')].filter(a => !a.hidden);
              if (open.length !== 1) return -1;
              shown.add(open[0].id);
            }}
            return shown.size;
        }})()""")
        check(reached == want["kernels"], f"O{level}: the graph reaches {reached} of {want['kernels']} kernels", failures)
        # Every pass can be stepped to, and shows its diff.
        stepped = browser.evaluate(f"""(() => {{
            const stepper = document.querySelector('#O{level} .stepper');
            const next = stepper.querySelector('.next');
            let seen = 0;
            stepper.querySelector('select').value = '0';
            stepper.querySelector('select').dispatchEvent(new Event('change'));
            for (let i = 0; i < 100; ++i) {{
              const open = [...stepper.querySelectorAll('article.step')].filter(a => !a.hidden);
              if (open.length !== 1 || !open[0].querySelector('pre.diff')) return -1;
              if (+open[0].dataset.step !== i) break;
              ++seen;
              next.click();
            }}
            return seen;
        }})()""")
        check(stepped == want["steps"], f"O{level}: stepped through {stepped} of {want['steps']} passes", failures)
        # The walkthrough's links go to headings inside the level's view.
        for heading in ("timeline", "passes"):
            shown = browser.evaluate(f"""(() => {{ show('#O{level}-{heading}');
                return [...document.querySelectorAll('section.view')].filter(s => !s.hidden).map(s => s.id); }})()""")
            check(shown == [f"O{level}"], f"#O{level}-{heading} shows {shown}", failures)

    points = browser.evaluate("document.querySelectorAll('svg.roofline circle.point').length")
    check(points == sum(l["points"] for l in expected), f"the roofline has {points} points", failures)
    ladder = browser.evaluate("document.querySelectorAll('table.ladder tr').length")
    check(ladder == LEVELS + 1, f"the ladder table has {ladder} rows", failures)
    fusion = browser.evaluate("document.querySelectorAll('#fusion table.fusion').length")
    check(fusion == LEVELS - 1, f"{fusion} level-to-level tables", failures)


def timeline_note(browser, level):
    return browser.evaluate(f"document.querySelector('#O{level}-timeline + p.hint').textContent")


def main():
    tlc, chromium, model, work = sys.argv[1:5]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    failures = []
    site = make_site(tlc, model, work, "report", [], failures)
    persistent_site = make_site(tlc, model, work, "report-persistent", ["--persistent"], failures)
    expected = expected_counts(tlc, model, work, False)
    persistent_expected = expected_counts(tlc, model, work, True)
    check(persistent_expected[3]["launches"] > persistent_expected[2]["launches"],
          "--persistent: O3 has no more tasks than O2 has launches", failures)

    browser = Chromium(chromium, os.path.join(work, "profile"))
    try:
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.page(domain + ".enable")
        browser.page("Emulation.setDeviceMetricsOverride",
                     {"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": False})

        print("--persistent:")
        check_site(browser, persistent_site, persistent_expected, failures)
        note = timeline_note(browser, 3)
        check("Measured per-SM task times need a GPU" in note, f"--persistent, O3's timeline says: {note}", failures)

        print("the default:")
        check_site(browser, site, expected, failures)
        note = timeline_note(browser, 3)
        check("With --persistent" in note, f"O3's timeline says: {note}", failures)

        # The screenshot: O2 with the first block's first norm selected.
        rmsnorm = browser.evaluate("""[...document.querySelectorAll('#O2 .graph g.node')]
            .find(n => n.textContent.includes('%rmsnorm\\n') || n.querySelector('text')?.textContent === '%rmsnorm').id""")
        browser.evaluate(f"location.hash = '#O2/{rmsnorm.split('-')[1]}'; window.scrollTo(0, 0)")
        time.sleep(0.5)
        selected = browser.evaluate("[...document.querySelectorAll('#O2 article.kernel')].filter(a => !a.hidden).map(a => a.id)")
        check(selected == ["O2-k1"], f"selecting %rmsnorm at O2 shows {selected}", failures)
        shot = browser.page("Page.captureScreenshot", {"format": "png"})
        with open(os.path.join(work, "report.png"), "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        failures += problems(browser.events)
    finally:
        browser.close()

    for failure in failures:
        print("FAIL:", failure)
    print("screenshot:", os.path.join(work, "report.png"))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
