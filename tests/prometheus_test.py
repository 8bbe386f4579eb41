#!/usr/bin/env python3
"""The metrics, the dashboard and the rules against a real Prometheus.

Starts the real sortd on the OpenCL CPU device (so kernel stage timings
exist, labelled path="opencl-cpu") with one injected device fault
(--inject_faults, so a CPU fallback exists), a real
Prometheus (Debian's package) scraping it every second with the repository's
rules, drives a bounded verified load through sortctl, then:

  * promtool check config / check rules / check metrics (on a real scrape);
  * every PromQL expression of every panel of the Grafana dashboard must
    parse and return data (at least one sample that is not NaN);
  * every recording rule must return data, every alerting rule must parse,
    and Prometheus must report every rule group healthy;
  * the alerts this server must raise (serving without a GPU, fault
    injection on) become pending or firing, and SortdDown and SortdAbsent
    stay inactive (the alerts find the scraped target by its label);
  * the per-stage kernel histograms are there, per device.

Usage: prometheus_test.py --sortd PATH --sortctl PATH --repo DIR
"""
import argparse
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

RATE_INTERVAL = "1m"  # what Grafana's $__rate_interval stands for here
# Alerts this sortd (OpenCL CPU device, --inject_faults) must raise.
EXPECTED_ALERTS = {"SortdServingWithoutGpu", "SortdFaultInjectionEnabled"}
# Alerts that must stay inactive: the target carries the label the alerts
# select sortd's targets by (app_kubernetes_io_name), and is up.
QUIET_ALERTS = {"SortdDown", "SortdAbsent"}


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def wait_for(what, predicate, timeout):
    """Polls `predicate` (each call is an observation, not a guess at a
    duration) until it is true or `timeout` seconds pass."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if predicate():
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    fail("timed out waiting for " + what)


class Sortd:
    def __init__(self, binary, args, env):
        self.proc = subprocess.Popen(
            [binary] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env)
        self.lines = []
        self.serving = threading.Event()
        self.address = self.metrics = None
        threading.Thread(target=self._read, args=(self.proc.stdout,),
                         daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr,),
                         daemon=True).start()

    def _read(self, stream):
        for line in stream:
            self.lines.append(line.rstrip())
            m = re.search(r"serving on (\S+) \(metrics on (\S+)/metrics\)",
                          line)
            if m:
                self.address, self.metrics = m.group(1), m.group(2)
                self.serving.set()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


def promtool(*args, stdin=None):
    r = subprocess.run(["promtool"] + list(args), input=stdin, text=True,
                       capture_output=True)
    if r.returncode != 0:
        fail("promtool %s failed:\n%s%s" % (" ".join(args), r.stdout,
                                             r.stderr))
    return r.stdout


class Prometheus:
    def __init__(self, port):
        self.base = "http://127.0.0.1:%d" % port

    def query(self, expr):
        url = self.base + "/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr})
        try:
            body = http_get(url)
        except urllib.error.HTTPError as e:
            return {"status": "error", "error": e.read().decode()}
        return json.loads(body)


def has_data(result):
    """True when a query result holds at least one sample that is a number
    (histogram quantiles over no observations are NaN: no data)."""
    data = result.get("data", {})
    kind, rows = data.get("resultType"), data.get("result", [])
    if kind == "scalar":
        rows = [{"value": rows}]
    for row in rows:
        value = row.get("value")
        if value and not math.isnan(float(value[1])):
            return True
    return False


def dashboard_exprs(dashboard):
    for panel in dashboard["panels"]:
        for t in panel.get("targets", []):
            yield panel["title"], t["expr"]


def substitute(expr):
    # Grafana's values for the variables: every instance, every device (the
    # per-device row repeats over the devices).
    return (expr.replace("$__rate_interval", RATE_INTERVAL)
            .replace('instance=~"$instance"', 'instance=~".+"')
            .replace('device=~"$device"', 'device=~".+"'))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sortd", required=True)
    ap.add_argument("--sortctl", required=True)
    ap.add_argument("--repo", required=True)
    a = ap.parse_args()
    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            fail(tool + " is not installed: run scripts/install-deps.sh")
    repo = os.path.abspath(a.repo)
    prom_dir = os.path.join(repo, "deploy", "prometheus")
    dashboard_path = os.path.join(repo, "deploy", "grafana", "dashboards",
                                  "sortd.json")
    rules_path = os.path.join(prom_dir, "sortd-rules.yml")
    with open(dashboard_path) as f:
        dashboard = json.load(f)

    promtool("check", "config", os.path.join(prom_dir, "prometheus.yml"))
    promtool("check", "rules", rules_path)

    tmp = tempfile.mkdtemp(prefix="sortd-prom-")
    sortd = Sortd(a.sortd, [
        "--device=opencl-cpu", "--kernel_cache_dir=",
        "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
        "--cpu_max_keys=100", "--solo_min_keys=100000",
        "--transpose_cpu_max_matrices=1",
        "--transpose_solo_min_matrices=100000",
        "--spill_to_cpu=false", "--max_batch_delay=2ms",
        "--inject_faults=enqueue=4"], dict(os.environ))
    prom = None
    try:
        if not sortd.serving.wait(180):
            fail("sortd did not start:\n" + "\n".join(sortd.lines))
        port = free_port()
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n"
                    "  evaluation_interval: 1s\n"
                    "rule_files:\n  - %s\n"
                    "scrape_configs:\n  - job_name: sortd\n"
                    "    static_configs:\n      - targets: ['%s']\n"
                    "        labels: {app_kubernetes_io_name: sortd}\n"
                    % (rules_path, sortd.metrics))
        promtool("check", "config", config)
        prom = subprocess.Popen(
            ["prometheus", "--config.file=" + config,
             "--storage.tsdb.path=" + os.path.join(tmp, "data"),
             "--web.listen-address=127.0.0.1:%d" % port,
             "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        p = Prometheus(port)
        wait_for("Prometheus to be ready",
                 lambda: http_get(p.base + "/-/ready").strip() != "", 120)
        wait_for("the first scrape of sortd",
                 lambda: has_data(p.query('up{job="sortd"} == 1')), 60)

        # Calls before the load until Prometheus has scraped one answered
        # on the OpenCL device (the injected fault sends one to the CPU
        # path): the counters then rise between two samples however fast
        # the load runs (a series first seen at its final value has no rate).
        def one_call_scraped():
            subprocess.run([a.sortctl, "--target=" + sortd.address, "sort",
                            "--random=500", "--verify"], check=True,
                           stdout=subprocess.DEVNULL)
            return has_data(p.query('sortd_requests_total{path="opencl-cpu"}'))
        wait_for("a scrape of a call on the OpenCL device", one_call_scraped,
                 60)

        # A bounded load, 8 calls at a time, every answer verified.
        calls = []
        for i in range(48):
            kind = i % 6
            if kind == 0:
                args = ["sort", "--random=50"]
            elif kind == 1:
                args = ["sort", "--type=f32", "--desc", "--random=1500"]
            elif kind == 2:
                args = ["sort", "--type=i64", "--values=u32", "--random=3000"]
            elif kind == 3:
                args = ["sort", "--type=u32", "--permutation", "--random=800"]
            elif kind == 4:
                args = ["transpose", "--random=40"]
            else:
                args = ["sort", "--type=u64", "--random=200000"]
            calls.append([a.sortctl, "--target=" + sortd.address] + args +
                         ["--verify", "--seed=%d" % i])
        for start in range(0, len(calls), 8):
            batch = [subprocess.Popen(c, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True)
                     for c in calls[start:start + 8]]
            for proc in batch:
                out, _ = proc.communicate(timeout=300)
                if proc.returncode != 0:
                    fail("sortctl failed (%d): %s" % (proc.returncode, out))

        scrape = http_get("http://%s/metrics" % sortd.metrics)
        promtool("check", "metrics", stdin=scrape)
        if "\nsortd_fault_injection_enabled 1\n" not in scrape:
            fail("sortd_fault_injection_enabled is not 1 with --inject_faults")
        if 'path="opencl-cpu"' not in scrape or 'path="gpu"' in scrape:
            fail('work on the OpenCL CPU device is not labelled '
                 'path="opencl-cpu" (or some is labelled gpu)')
        # Per-stage kernel histograms, per device, in the scrape itself.
        stages = set(re.findall(
            r'sortd_kernel_stage_duration_seconds_count\{device="([^"]+)",'
            r'kernel="([^"]+)",stage="([^"]+)"\}', scrape))
        if not any(s[2] == "scatter" or s[2] == "local_sort" for s in stages):
            fail("no sort stage histograms in the scrape")
        if not any(s[2] == "transpose" for s in stages):
            fail("no transpose stage histogram in the scrape")

        # Several scrapes after the load, so that rates have two samples.
        wait_for("scrapes after the load", lambda: has_data(p.query(
            'count_over_time(up{job="sortd"}[1m]) > 5')), 60)
        latest = time.monotonic()
        wait_for("a scrape newer than the load", lambda: has_data(p.query(
            'time() - timestamp(sortd_build_info) < 2')) and
            time.monotonic() - latest > 2, 30)

        failures = []
        checked = 0
        for title, expr in dashboard_exprs(dashboard):
            q = substitute(expr)
            r = p.query(q)
            checked += 1
            if r.get("status") != "success":
                failures.append("%s: %s does not parse: %s" %
                                (title, q, r.get("error")))
            elif not has_data(r):
                failures.append("%s: %s returns no data" % (title, q))
        variable = dashboard["templating"]["list"][1]["query"]["query"]
        m = re.fullmatch(r"label_values\((\w+), *(\w+)\)", variable)
        if not m:
            failures.append("instance variable query: " + variable)
        else:
            values = json.loads(http_get(
                p.base + "/api/v1/label/%s/values?%s" % (m.group(2),
                urllib.parse.urlencode({"match[]": m.group(1)}))))
            if not values.get("data"):
                failures.append("instance variable: no values")

        def alert_states():
            groups = json.loads(http_get(p.base + "/api/v1/rules"))
            return {r["name"]: r.get("state") for g in groups["data"]["groups"]
                    for r in g["rules"] if r["type"] == "alerting"}

        wait_for("alerts %s pending or firing" % sorted(EXPECTED_ALERTS),
                 lambda: all(alert_states().get(name) in ("pending", "firing")
                             for name in EXPECTED_ALERTS), 60)

        states = alert_states()
        for name in sorted(QUIET_ALERTS):
            if states.get(name) != "inactive":
                failures.append("alert %s is %s, not inactive" %
                                (name, states.get(name)))

        rules = json.loads(http_get(p.base + "/api/v1/rules"))
        groups = rules["data"]["groups"]
        if not groups:
            failures.append("Prometheus loaded no rule groups")
        for g in groups:
            for rule in g["rules"]:
                if rule.get("health") not in ("ok", "unknown"):
                    failures.append("rule %s: health %s %s" % (
                        rule["name"], rule.get("health"),
                        rule.get("lastError", "")))
                r = p.query(rule["query"])
                checked += 1
                if r.get("status") != "success":
                    failures.append("rule %s does not parse: %s" %
                                    (rule["name"], r.get("error")))
                elif rule["type"] == "recording" and not has_data(r):
                    failures.append("recording rule %s returns no data" %
                                    rule["name"])
        if failures:
            fail("%d of %d expressions:\n  " % (len(failures), checked) +
                 "\n  ".join(failures))
        print("OK: %d dashboard and rule expressions return data; %d stage "
              "series" % (checked, len(stages)))
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(timeout=30)
        code = sortd.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if code != 0:
        fail("sortd exited %d" % code)


if __name__ == "__main__":
    main()
