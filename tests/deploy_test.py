#!/usr/bin/env python3
"""Static checks of the deployment files (no container engine runs here).

  * yamllint --strict on every YAML file of the repository;
  * `kubectl kustomize` renders deploy/k8s/base and each overlay (dev,
    prod), and the rendered objects carry what a deployment needs (GPU
    resource, gRPC probes, security context, scrape annotations, services
    for round_robin, PDB, HPA on CPU, a hash-suffixed flags ConfigMap the
    pods mount, spread over nodes, a NetworkPolicy admitting only 50051 and
    9464, the kernel cache's volume); prod also a ReadWriteMany claim for
    the kernel cache, the PodMonitor, and the HPA on sortd_queued_keys with
    its prometheus-adapter rule;
  * every flag in the ConfigMap's flagfile is one sortd knows; it asks for
    the GPU explicitly (--device=gpu) and injects no faults;
  * the container's memory limit covers what those flags let sortd hold
    (memory_need(): the formula of deploy/README.md, "Memory limit");
  * the Dockerfile's build stage runs the same install and build scripts as
    README's commands and .ci/run, and its runtime stage carries the ICD
    loader, Intel's GPU runtime by default (OPENCL_DRIVERS), a non-root user,
    the health check and the cache volume; its NVIDIA variant
    (GPU_VENDOR=nvidia) registers the host driver's OpenCL ICD and sets the
    NVIDIA container runtime's variables; .dockerignore leaves out build
    trees and .git (deploy/image-test.sh builds and runs the image);
  * the compose stack's services, ports, volumes and mounted files;
  * promtool check config / check rules / test rules (sortd-rules.test.yml),
    and every alert's runbook is a section of deploy/README.md.

Usage: deploy_test.py --repo DIR --sortd PATH
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
    return ok


def run(cmd, cwd=None):
    return subprocess.run(cmd, cwd=cwd, text=True, capture_output=True)


def flagfile_names(text):
    return [m.group(1) for m in re.finditer(r"^--([a-z_]+)=", text, re.M)]


QUANTITY_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
                  "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def quantity_bytes(q):
    """A Kubernetes memory quantity ("16Gi", "8G", "1073741824") in bytes."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([A-Za-z]*)", str(q).strip())
    if not m or (m.group(2) and m.group(2) not in QUANTITY_UNITS):
        raise ValueError("unknown memory quantity %r" % q)
    return float(m.group(1)) * QUANTITY_UNITS.get(m.group(2), 1)


def flag_defaults(helpfull):
    """sortd's flag defaults, from its --helpfull text."""
    # Each entry: "--name (help, over lines); default: value;", the default
    # sometimes on a line of its own; a match never runs into the next entry.
    return {m.group(1): m.group(2).strip('"') for m in re.finditer(
        r"^\s*--([a-z_]+) \((?:(?!\n\s*--[a-z_]+ \().)*?\);\s+default: "
        r"([^;]*);", helpfull, re.S | re.M)}


# One GPU (the pod asks for gpu.intel.com/i915: 1) of up to two tiles, each
# a device worker (--sub_devices).
WORKERS_PER_GPU = 2


def memory_need(flags):
    """The most memory sortd holds at once under `flags` (name -> int), in
    bytes; deploy/README.md ("Memory limit") derives each term:
      max_held_bytes          everything held for requests, each call
                              charged its peak before it holds it
                              (server/held_bytes.h)
      grpc_memory_bytes       what gRPC buffers for all connections (its
                              resource quota): messages still being
                              received, which sortd charges once whole
      workers x pipeline_depth x (36 x max_batch_keys + 64 MiB)
                              each device runner's packing buffer (in and
                              out: 36 B/key at worst) and pinned staging
      host_pool_bytes         idle host buffers kept for reuse (where sortd
                              has the flag)
      cpu_scratch_bytes       idle CPU-path sort scratch kept for reuse
                              (where sortd has the flag)
      split_scratch_bytes     idle split-sort scratch kept for reuse
                              (where sortd has the flag)
      1 GiB                   the process: code, gRPC, oneTBB, the OpenCL
                              runtime and compiled programs
    """
    gib, mib = 2**30, 2**20
    return (flags["max_held_bytes"] + flags["grpc_memory_bytes"] +
            flags["gpus"] * WORKERS_PER_GPU * flags["pipeline_depth"] *
            (36 * flags["max_batch_keys"] + 64 * mib) +
            flags.get("host_pool_bytes", 0) +
            flags.get("cpu_scratch_bytes", 0) +
            flags.get("split_scratch_bytes", 0) + gib)


# What one call holds at most per byte of its array (a u32 sort with a
# permutation and compact keys: server/held_bytes.h), and a margin for an
# answer chunk and the messages' own bytes.
CALL_BYTES_PER_ARRAY_BYTE = 9
CALL_MARGIN = 64 * 2**20


def check_memory_limit(flagfile, helpfull, limit, gpus):
    """The container's memory limit covers memory_need() of the flagfile's
    flags (sortd's defaults for those it does not set), and one call at
    --max_stream_bytes or --max_request_bytes fits --max_call_bytes."""
    defaults = flag_defaults(helpfull)
    values = {}
    for name in ("max_held_bytes", "max_call_bytes", "max_stream_bytes",
                 "max_request_bytes", "grpc_memory_bytes", "max_batch_keys",
                 "pipeline_depth", "host_pool_bytes", "cpu_scratch_bytes",
                 "split_scratch_bytes"):
        m = re.search(r"^--%s=(\d+)$" % name, flagfile, re.M)
        text = m.group(1) if m else defaults.get(name)
        if name in ("host_pool_bytes", "cpu_scratch_bytes",
                    "split_scratch_bytes") and text is None:
            continue  # a sortd without that pool
        if not check(text is not None and text.isdigit(),
                     "no value or default for --%s" % name):
            return
        values[name] = int(text)
    values["gpus"] = gpus
    check(values["grpc_memory_bytes"] > 0,
          "--grpc_memory_bytes=0 leaves what gRPC buffers unbounded: no "
          "memory limit holds (deploy/README.md, \"Memory limit\")")
    need = memory_need(values)
    call = values["max_call_bytes"] or values["max_held_bytes"] // 2
    for name in ("max_stream_bytes", "max_request_bytes"):
        check(call >= CALL_BYTES_PER_ARRAY_BYTE * values[name] + CALL_MARGIN,
              "--max_call_bytes (%d) lets no call at --%s=%d be admitted: it "
              "may hold %d x that (deploy/README.md, \"Memory limit\")" % (
                  call, name, values[name], CALL_BYTES_PER_ARRAY_BYTE))
    try:
        have = quantity_bytes(limit)
    except ValueError as e:
        check(False, str(e))
        return
    check(have >= need,
          "container memory limit %s (%.2f GiB) is below what the flags let "
          "sortd hold, %.2f GiB (deploy/README.md, \"Memory limit\"; lower "
          "--max_held_bytes or --grpc_memory_bytes, or raise the limit)" % (
              limit, have / 2**30, need / 2**30))


# What `kubectl kustomize` renders, and what each must carry beyond the
# common checks: the kernel cache's volume kind, the Prometheus Operator's
# resources (PodMonitor, PrometheusRule, the dashboards' ConfigMap), the HPA
# on queue depth, the GPU vendor (its resource, RuntimeClass, image tag).
INTEL = {"gpu": "gpu.intel.com/i915", "runtime_class": None,
         "render_groups": True, "tag": None}
NVIDIA = {"gpu": "nvidia.com/gpu", "runtime_class": "nvidia",
          "render_groups": False, "tag": "-nvidia"}
KUSTOMIZATIONS = {
    "base": dict(INTEL, cache="emptyDir", monitoring=False, queue_hpa=False),
    "overlays/dev": dict(INTEL, cache="emptyDir", monitoring=False,
                         queue_hpa=False),
    "overlays/prod": dict(INTEL, cache="persistentVolumeClaim",
                          monitoring=True, queue_hpa=True),
    "overlays/nvidia": dict(NVIDIA, cache="persistentVolumeClaim",
                            monitoring=True, queue_hpa=True),
}
GPU_RESOURCES = {INTEL["gpu"], NVIDIA["gpu"]}


def check_k8s(repo, sortd):
    if shutil.which("kubectl") is None:
        check(False, "kubectl is not installed: run scripts/install-deps.sh")
        return
    k8s = os.path.join(repo, "deploy", "k8s")
    for name, expect in KUSTOMIZATIONS.items():
        r = run(["kubectl", "kustomize", os.path.join(k8s, name)])
        if not check(r.returncode == 0,
                     "kubectl kustomize %s failed: %s" % (name, r.stderr)):
            continue
        before = len(failures)
        check_rendered(repo, sortd, [o for o in yaml.safe_load_all(r.stdout)
                                     if o], expect)
        failures[before:] = ["deploy/k8s/%s: %s" % (name, f)
                             for f in failures[before:]]


def check_rendered(repo, sortd, objs, expect):
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o["kind"], []).append(o)
        check(o["metadata"].get("namespace") == "sortd" or
              o["kind"] == "Namespace",
              "%s/%s is not in namespace sortd" % (o["kind"],
                                                  o["metadata"]["name"]))
    for kind in ("Namespace", "ConfigMap", "Deployment", "Service",
                 "PodDisruptionBudget", "HorizontalPodAutoscaler",
                 "NetworkPolicy"):
        check(kind in by_kind, "rendered manifests lack a " + kind)
    if "Deployment" not in by_kind:
        return
    dep = by_kind["Deployment"][0]
    spec = dep["spec"]
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    check(all(labels.get(k) == v
              for k, v in spec["selector"]["matchLabels"].items()),
          "Deployment selector does not match its pod labels")
    c = pod["containers"][0]
    res = c.get("resources", {})
    gpu = expect["gpu"]
    check(res.get("requests", {}).get(gpu) == 1 and
          res.get("limits", {}).get(gpu) == 1,
          "container does not request and limit %s: 1" % gpu)
    others = (set(res.get("requests", {})) | set(res.get("limits", {}))) & (
        GPU_RESOURCES - {gpu})
    check(not others, "container asks for %s beside %s" % (sorted(others),
                                                          gpu))
    check(pod.get("runtimeClassName") == expect["runtime_class"],
          "runtimeClassName is %r, not %r" % (pod.get("runtimeClassName"),
                                              expect["runtime_class"]))
    tag = c.get("image", "").rpartition(":")[2]
    check((expect["tag"] is None and not tag.endswith(NVIDIA["tag"])) or
          (expect["tag"] is not None and tag.endswith(expect["tag"])),
          "image %s is not the %s image" % (c.get("image"), gpu))
    check("cpu" in res.get("requests", {}) and
          "memory" in res.get("requests", {}) and
          "memory" in res.get("limits", {}),
          "container lacks cpu/memory requests or a memory limit")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        g = c.get(probe, {}).get("grpc", {})
        check(g.get("port") == 50051, probe + " is not a gRPC probe on 50051")
    check(c["readinessProbe"]["grpc"].get("service") == "sortd.v1.SortService",
          "readiness does not probe the sortd.v1.SortService health")
    psc, csc = pod.get("securityContext", {}), c.get("securityContext", {})
    check(psc.get("runAsNonRoot") is True, "pod does not run as non-root")
    check(psc.get("seccompProfile", {}).get("type") == "RuntimeDefault",
          "pod has no RuntimeDefault seccomp profile")
    check(bool(psc.get("supplementalGroups")) == expect["render_groups"],
          "supplementalGroups for the GPU render node expected: %s, has: %s"
          % (expect["render_groups"], psc.get("supplementalGroups")))
    check(csc.get("allowPrivilegeEscalation") is False and
          csc.get("readOnlyRootFilesystem") is True and
          csc.get("capabilities", {}).get("drop") == ["ALL"],
          "container securityContext is not restrictive")
    ann = spec["template"]["metadata"].get("annotations", {})
    check(ann.get("prometheus.io/scrape") == "true" and
          ann.get("prometheus.io/port") == "9464",
          "pod lacks Prometheus scrape annotations for port 9464")
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    check(ports == {"grpc": 50051, "metrics": 9464},
          "container ports are not grpc 50051 and metrics 9464")
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    check("/etc/sortd" in mounts and "/var/cache/sortd" in mounts,
          "flags or kernel-cache volume not mounted")
    check("--flagfile=/etc/sortd/sortd.flags" in c.get("args", []),
          "sortd is not started with the ConfigMap's flagfile")
    cm = next((m for m in by_kind.get("ConfigMap", [])
               if m["metadata"]["name"].startswith("sortd-flags")), {})
    flags = cm.get("data", {}).get("sortd.flags", "")
    # Shared memory: --shm_socket inside a pod-local emptyDir mounted in
    # the container (a sidecar mounts the same volume).
    shm_socket = next((f.split("=", 1)[1] for f in flags.split()
                       if f.startswith("--shm_socket=")), "")
    pod_local = {v["name"] for v in spec["template"]["spec"].get(
        "volumes", []) if "emptyDir" in v}
    check(shm_socket != "" and any(
        shm_socket.startswith(path.rstrip("/") + "/") and name in pod_local
        for path, name in mounts.items()),
        "--shm_socket is not inside a pod-local emptyDir mounted in sortd")
    names = flagfile_names(flags)
    check(names, "the flagfile holds no flags")
    helpfull = run([sortd, "--helpfull"])
    known = set(re.findall(r"--([a-z_]+) \(", helpfull.stdout +
                           helpfull.stderr))
    for n in names:
        check(n in known, "flagfile flag --%s is not a sortd flag" % n)
    # The pod asks for its GPU explicitly: without one sortd refuses to
    # start (the probes fail) rather than serve on the OpenCL CPU device.
    devices = re.findall(r"^--device=(\S+)$", flags, re.M)
    check(devices == ["gpu"],
          "the flagfile does not ask for the GPU explicitly (--device=gpu), "
          "but %s" % (devices or "no --device"))
    check(not re.search(r"^--inject_faults", flags, re.M),
          "the flagfile injects faults (--inject_faults is for tests only)")
    gpus = res.get("limits", {}).get(gpu, 0)
    if check("memory" in res.get("limits", {}), "no memory limit"):
        check_memory_limit(flags, helpfull.stdout + helpfull.stderr,
                           res["limits"]["memory"], gpus)
    m = re.search(r"^--drain_timeout=(\d+)s$", flags, re.M)
    check(m and pod.get("terminationGracePeriodSeconds", 30) >
          int(m.group(1)),
          "terminationGracePeriodSeconds does not exceed --drain_timeout")
    services = {s["metadata"]["name"]: s for s in by_kind.get("Service", [])}
    heads = [s for s in services.values()
             if s["spec"].get("clusterIP") == "None"]
    cips = [s for s in services.values()
            if s["spec"].get("type") == "ClusterIP"]
    check(len(heads) == 1, "no headless Service for round_robin")
    check(len(cips) == 1, "no ClusterIP Service")
    for s in services.values():
        check(any(p["port"] == 50051 for p in s["spec"]["ports"]),
              "Service %s does not serve gRPC on 50051" %
              s["metadata"]["name"])
        check(all(labels.get(k) == v
                  for k, v in s["spec"]["selector"].items()),
              "Service %s selects no sortd pod" % s["metadata"]["name"])
    hpa = by_kind.get("HorizontalPodAutoscaler", [{}])[0]
    check(hpa.get("spec", {}).get("scaleTargetRef", {}).get("name") ==
          dep["metadata"]["name"], "HPA does not scale the Deployment")
    pdb = by_kind.get("PodDisruptionBudget", [{}])[0]
    check(all(labels.get(k) == v for k, v in
              pdb.get("spec", {}).get("selector", {})
              .get("matchLabels", {}).items()),
          "PDB selects no sortd pod")

    # The flagfile's ConfigMap carries a hash of its text in its name
    # (configMapGenerator), and the pods mount that name: a change rolls them.
    cm_name = cm.get("metadata", {}).get("name", "")
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    check(re.fullmatch(r"sortd-flags-[a-z0-9]{6,}", cm_name),
          "the flags ConfigMap is not hash-suffixed (configMapGenerator): " +
          cm_name)
    check(volumes.get(mounts.get("/etc/sortd"), {}).get("configMap", {})
          .get("name") == cm_name,
          "the pods do not mount the generated ConfigMap " + cm_name)
    # Replicas spread over nodes.
    spread = [t for t in pod.get("topologySpreadConstraints", [])
              if t.get("topologyKey") == "kubernetes.io/hostname"]
    check(spread and all(labels.get(k) == v for k, v in spread[0].get(
        "labelSelector", {}).get("matchLabels", {"": None}).items()),
        "no topology spread of sortd pods over kubernetes.io/hostname")
    # Only the gRPC and metrics ports are admitted.
    nps = by_kind.get("NetworkPolicy", [])
    if check(len(nps) == 1, "no NetworkPolicy"):
        np = nps[0]["spec"]
        check(all(labels.get(k) == v for k, v in
                  np.get("podSelector", {}).get("matchLabels", {}).items())
              and np.get("podSelector", {}).get("matchLabels"),
              "the NetworkPolicy selects no sortd pod")
        check("Ingress" in np.get("policyTypes", []),
              "the NetworkPolicy does not restrict ingress")
        admitted = [p.get("port") for rule in np.get("ingress", [])
                    for p in rule.get("ports", [{"port": "any"}])]
        check(sorted(admitted, key=str) == [50051, 9464],
              "the NetworkPolicy admits %s, not exactly 50051 and 9464" %
              admitted)
        # Each port only from its own pods: gRPC from pods labelled as
        # clients, metrics from Prometheus; no rule open to every source.
        sources = {50051: {"sortd-client": "true"},
                   9464: {"app.kubernetes.io/name": "prometheus"}}
        for rule in np.get("ingress", []):
            ports = [p.get("port") for p in rule.get("ports", [])]
            peers = rule.get("from", [])
            if not check(len(ports) == 1 and ports[0] in sources,
                         "a NetworkPolicy rule admits ports %s, not one of "
                         "50051 and 9464" % ports):
                continue
            want = sources[ports[0]]
            check(peers and all(
                      peer.get("podSelector", {}).get("matchLabels") == want
                      and not peer.get("ipBlock") for peer in peers),
                  "port %d is admitted from %s, not only from pods "
                  "labelled %s" % (ports[0], peers or "anywhere", want))
    # The kernel cache: emptyDir, or a claim that outlives the pod.
    cache = volumes.get(mounts.get("/var/cache/sortd"), {})
    check(expect["cache"] in cache,
          "the kernel cache is not on a %s volume: %s" % (expect["cache"],
                                                         cache))
    if "persistentVolumeClaim" in cache:
        claim = cache["persistentVolumeClaim"].get("claimName")
        pvcs = {p["metadata"]["name"]: p
                for p in by_kind.get("PersistentVolumeClaim", [])}
        check(claim in pvcs, "no PersistentVolumeClaim %s rendered" % claim)
        if claim in pvcs:
            check("ReadWriteMany" in pvcs[claim]["spec"].get("accessModes",
                                                             []),
                  "the kernel cache claim is not ReadWriteMany (replicas "
                  "on several nodes share it)")
    # The Prometheus Operator's PodMonitor, sortd's rules as a
    # PrometheusRule, the dashboards for Grafana's sidecar.
    pms = by_kind.get("PodMonitor", [])
    check(bool(pms) == expect["monitoring"],
          "PodMonitor expected: %s, rendered: %d" % (expect["monitoring"],
                                                     len(pms)))
    check_monitoring(repo, by_kind, expect["monitoring"])
    for pm in pms:
        spec = pm["spec"]
        check(spec.get("selector", {}).get("matchLabels") and
              all(labels.get(k) == v for k, v in
                  spec["selector"]["matchLabels"].items()),
              "the PodMonitor selects no sortd pod")
        check([e.get("port") for e in spec.get("podMetricsEndpoints", [])] ==
              ["metrics"], "the PodMonitor does not scrape port metrics")
        check("app.kubernetes.io/name" in spec.get("podTargetLabels", []),
              "the PodMonitor does not give targets app_kubernetes_io_name, "
              "the label the alerts select on")
    # The HPA: CPU always, queue depth through prometheus-adapter in prod.
    metrics = hpa.get("spec", {}).get("metrics", [])
    check(any(m.get("resource", {}).get("name") == "cpu" for m in metrics),
          "the HPA does not scale on CPU")
    pods_metrics = [m["pods"]["metric"]["name"] for m in metrics
                    if m.get("type") == "Pods"]
    check(("sortd_queued_keys" in pods_metrics) == expect["queue_hpa"],
          "HPA on sortd_queued_keys expected: %s, has: %s" % (
              expect["queue_hpa"], pods_metrics))
    if expect["queue_hpa"]:
        with open(os.path.join(repo, "deploy", "k8s", "overlays", "prod",
                               "prometheus-adapter-rules.yaml")) as f:
            rules = yaml.safe_load(f)["rules"]["custom"]
        check(any("sortd_queued_keys" in r["seriesQuery"] and
                  r["name"]["as"] == "sortd_queued_keys" and
                  set(r["resources"]["overrides"]) == {"namespace", "pod"}
                  for r in rules),
              "prometheus-adapter-rules.yaml serves no sortd_queued_keys "
              "pods metric")


def check_monitoring(repo, by_kind, expected):
    prs = by_kind.get("PrometheusRule", [])
    boards = [m for m in by_kind.get("ConfigMap", [])
              if m["metadata"].get("labels", {}).get("grafana_dashboard")]
    check(bool(prs) == expected and bool(boards) == expected,
          "PrometheusRule and dashboards expected: %s, rendered: %d and %d"
          % (expected, len(prs), len(boards)))
    if not expected:
        return
    # The rules: deploy/prometheus/sortd-rules.yml's groups, unchanged.
    with open(os.path.join(repo, "deploy", "prometheus",
                           "sortd-rules.yml")) as f:
        groups = yaml.safe_load(f)["groups"]
    check(len(prs) == 1 and prs[0]["spec"].get("groups") == groups,
          "the PrometheusRule's groups are not sortd-rules.yml's: run "
          "deploy/k8s/components/prometheus-operator/update-prometheusrule.sh")
    # The dashboards: every file of deploy/grafana/dashboards, as it is, in
    # one ConfigMap labelled for the sidecar.
    d = os.path.join(repo, "deploy", "grafana", "dashboards")
    want = {}
    for name in sorted(os.listdir(d)):
        if name.endswith(".json"):
            with open(os.path.join(d, name)) as f:
                want[name] = f.read()
    check(len(boards) == 1 and boards[0].get("data") == want and
          boards[0]["metadata"]["labels"]["grafana_dashboard"] == "1",
          "the dashboards' ConfigMap does not hold exactly %s, labelled "
          "grafana_dashboard: \"1\"" % sorted(want))


def check_prometheusrule_file(repo):
    """The PrometheusRule file is what its script makes of the rules."""
    comp = os.path.join(repo, "deploy", "k8s", "components",
                        "prometheus-operator")
    path = os.path.join(comp, "prometheusrule.yaml")
    with open(path) as f:
        have = f.read()
    # The script, run on a copy: it reads ../../../prometheus/sortd-rules.yml
    # and writes prometheusrule.yaml beside itself.
    tmp = tempfile.mkdtemp()
    try:
        work = os.path.join(tmp, "k8s", "components", "prometheus-operator")
        os.makedirs(work)
        os.makedirs(os.path.join(tmp, "prometheus"))
        shutil.copy(os.path.join(comp, "update-prometheusrule.sh"), work)
        shutil.copy(os.path.join(repo, "deploy", "prometheus",
                                 "sortd-rules.yml"),
                    os.path.join(tmp, "prometheus"))
        r = run(["sh", os.path.join(work, "update-prometheusrule.sh")])
        if check(r.returncode == 0, "update-prometheusrule.sh: " + r.stderr):
            with open(os.path.join(work, "prometheusrule.yaml")) as f:
                check(f.read() == have,
                      "prometheusrule.yaml is not what "
                      "update-prometheusrule.sh makes of sortd-rules.yml: "
                      "run it")
    finally:
        shutil.rmtree(tmp)


def dockerfile_stages(text):
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    return ["FROM " + s for s in stages]


def check_docker(repo):
    with open(os.path.join(repo, "Dockerfile")) as f:
        text = f.read()
    # Continuation lines joined, comments dropped.
    text = re.sub(r"\\\n", " ", "\n".join(
        l for l in text.splitlines() if not l.lstrip().startswith("#")))
    stages = dockerfile_stages(text)
    # The dependencies (a stage of their own, kept as a cached image by
    # deploy/image-test.sh), the build on them, the runtime, a stage per
    # GPU vendor on it, and the image: GPU_VENDOR's stage, Intel's by
    # default.
    if not check(len(stages) == 6, "Dockerfile is not deps, build, runtime, "
                 "runtime-intel, runtime-nvidia and the GPU_VENDOR's one"):
        return
    deps, build, runtime, intel, nvidia, final = stages
    check(deps.startswith("FROM debian:bookworm AS deps"), "deps stage base")
    check(build.startswith("FROM deps AS build"), "build stage base")
    check(runtime.startswith("FROM debian:bookworm AS runtime\n"),
          "runtime stage base")
    check(intel.strip() == "FROM runtime AS runtime-intel",
          "the Intel stage is not the runtime stage as it is")
    check(re.match(r"^ARG GPU_VENDOR=intel$", text.split("\nFROM ", 1)[0]
                   .strip(), re.M) and
          final.strip() == "FROM runtime-${GPU_VENDOR:-intel}",
          "the image is not the stage of GPU_VENDOR, intel by default")
    # NVIDIA: no driver package; the host's libnvidia-opencl.so.1 (mounted
    # by the NVIDIA container runtime) registered as an ICD, the runtime's
    # variables set, the image's user restored.
    check(nvidia.startswith("FROM runtime AS runtime-nvidia\n") and
          re.search(r"echo libnvidia-opencl\.so\.1 > "
                    r"/etc/OpenCL/vendors/nvidia\.icd", nvidia),
          "the NVIDIA stage does not register libnvidia-opencl.so.1 in "
          "/etc/OpenCL/vendors/nvidia.icd")
    check(re.search(r"^ENV .*NVIDIA_VISIBLE_DEVICES=all", nvidia, re.M) and
          re.search(r"^ENV .*NVIDIA_DRIVER_CAPABILITIES=compute,utility\b",
                    nvidia, re.M),
          "the NVIDIA stage does not set NVIDIA_VISIBLE_DEVICES=all and "
          "NVIDIA_DRIVER_CAPABILITIES=compute,utility")
    users = re.findall(r"^USER (\S+)", nvidia, re.M)
    check(users and users[-1] not in ("root", "0"),
          "the NVIDIA stage ends as root")
    check(re.search(r"^RUN bash scripts/install-deps\.sh --build-only\s",
                    deps, re.M),
          "deps stage does not run scripts/install-deps.sh --build-only")
    check(re.search(r"^RUN .*cmake -S \. -B build .*"
                    r"-DSORTD_BUILD_TESTS=OFF.*cmake --build build", build,
                    re.M),
          "build stage does not configure and build sortd without its tests")
    check(re.search(r"^ARG SORTD_REVISION", build, re.M) and
          "SORTD_REVISION=${SORTD_REVISION}" in build,
          "build stage does not pass SORTD_REVISION to the build")
    # README's commands and CI go through the same scripts: run.sh and
    # test.sh call build.sh, which calls install-deps.sh.
    for script in ("run.sh", "test.sh"):
        with open(os.path.join(repo, "scripts", script)) as f:
            check("bash scripts/build.sh" in f.read(),
                  "scripts/%s does not call build.sh" % script)
    with open(os.path.join(repo, "scripts", "build.sh")) as f:
        check("bash scripts/install-deps.sh" in f.read(),
              "scripts/build.sh does not call install-deps.sh")
    with open(os.path.join(repo, "README.md")) as f:
        readme = f.read()
    check("bash scripts/run.sh" in readme and "bash scripts/test.sh" in readme,
          "README's two commands are not scripts/run.sh and scripts/test.sh")
    with open(os.path.join(repo, ".ci", "run")) as f:
        check("scripts/test.sh" in f.read(), ".ci/run does not call test.sh")
    check("ocl-icd-libopencl1" in runtime, "runtime stage lacks the ICD "
          "loader ocl-icd-libopencl1")
    # The drivers: the vendor's (Intel's GPU runtime for intel, none for
    # nvidia) by default; PoCL only when asked for
    # (docs/decisions/013-runtime-image.md).
    m = re.search(r'^ARG OPENCL_DRIVERS="([^"]*)"', runtime, re.M)
    if check(m, "runtime stage has no ARG OPENCL_DRIVERS"):
        check(m.group(1) == "vendor",
              "OPENCL_DRIVERS defaults to %r, not vendor" % m.group(1))
        check('drivers="${OPENCL_DRIVERS}"' in runtime and
              re.search(r"\bintel\) drivers=intel-opencl-icd ;; "
                        r"nvidia\) drivers= ;;", runtime) and
              re.search(r"ocl-icd-libopencl1 \$drivers\b", runtime),
              "runtime stage does not install OPENCL_DRIVERS, by default "
              "intel-opencl-icd for intel and nothing for nvidia")
    check(re.search(r"--no-install-recommends", runtime) and
          re.search(r"rm -rf /var/lib/apt/lists", runtime),
          "runtime stage installs recommends or keeps apt lists")
    with open(os.path.join(repo, ".dockerignore")) as f:
        ignored = set(f.read().split())
    for path in (".git", "build", ".device"):
        check(path in ignored, ".dockerignore does not leave out " + path)
    check(re.search(r"^USER (?!root)\S+", runtime, re.M),
          "runtime stage does not switch to a non-root user")
    check(re.search(r"^HEALTHCHECK .*sortctl.*health", runtime, re.M),
          "no HEALTHCHECK through sortctl health")
    check(re.search(r"^EXPOSE 50051 9464", runtime, re.M), "EXPOSE 50051 9464")
    check(re.search(r"^VOLUME /var/cache/sortd", runtime, re.M),
          "no volume for the kernel cache")
    check("--kernel_cache_dir=/var/cache/sortd" in runtime,
          "sortd does not use the cache volume")
    check("sortctl" in runtime.split("COPY --from=build", 1)[-1],
          "sortctl is not in the image")
    # Every package that ships a library sortd links is in the runtime list.
    if shutil.which("dpkg") and shutil.which("ldd"):
        ldd = run(["ldd", SORTD]).stdout
        libs = set(re.findall(r"^\s*(\S+\.so\S*) =>", ldd, re.M))
        # One dpkg query for every library (one each took half a minute):
        # each library's first match names its package.
        r = run(["dpkg", "-S"] + ["*/" + lib for lib in sorted(libs)])
        owner = {}
        for line in r.stdout.splitlines():
            pkg, sep, path = line.partition(": ")
            name = os.path.basename(path)
            if sep and name in libs and name not in owner:
                owner[name] = pkg.split(":")[0]
        pkgs = set(owner.values())
        base = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g", "libc6-i386",
                "libssl3", "libre2-9", "libc-ares2"}  # base or gRPC's deps
        for p in sorted(pkgs - base):
            check(p in runtime, "runtime stage lacks %s (sortd links it)" % p)


def check_compose(repo):
    d = os.path.join(repo, "deploy")
    with open(os.path.join(d, "compose.yaml")) as f:
        compose = yaml.safe_load(f)
    svcs = compose.get("services", {})
    for name in ("sortd", "prometheus", "grafana"):
        check(name in svcs, "compose lacks service " + name)
    if "sortd" in svcs:
        s = svcs["sortd"]
        check({"50051:50051", "9464:9464"} <= set(s.get("ports", [])),
              "compose sortd does not publish 50051 and 9464")
        ctx = os.path.normpath(os.path.join(d, s["build"]["context"]))
        check(os.path.exists(os.path.join(ctx, s["build"]["dockerfile"])),
              "compose build context has no Dockerfile")
        check(any(v.endswith(":/var/cache/sortd") for v in s.get("volumes", [])),
              "compose sortd keeps no kernel cache volume")
    named = set(compose.get("volumes", {}) or {})
    for name, s in svcs.items():
        for v in s.get("volumes", []):
            src = v.split(":")[0]
            if src.startswith("."):
                check(os.path.exists(os.path.join(d, src)),
                      "compose %s mounts missing %s" % (name, src))
            else:
                check(src in named, "compose %s uses undeclared volume %s" %
                      (name, src))
    if "prometheus" in svcs:
        check("9090:9090" in svcs["prometheus"].get("ports", []),
              "compose prometheus does not publish 9090")
    if "grafana" in svcs:
        mounts = svcs["grafana"].get("volumes", [])
        check(any("/etc/grafana/provisioning" in m for m in mounts) and
              any("/var/lib/grafana/dashboards" in m for m in mounts),
              "compose grafana lacks provisioning or dashboards")
    with open(os.path.join(d, "prometheus", "prometheus.yml")) as f:
        prom = yaml.safe_load(f)
    targets = [t for sc in prom["scrape_configs"]
               for st in sc.get("static_configs", []) for t in st["targets"]]
    check("sortd:9464" in targets, "Prometheus does not scrape sortd:9464")
    with open(os.path.join(d, "compose.gpu.yaml")) as f:
        gpu = yaml.safe_load(f)
    check("/dev/dri:/dev/dri" in gpu["services"]["sortd"].get("devices", []),
          "compose.gpu.yaml does not pass /dev/dri")


def markdown_anchors(text):
    """The anchors GitHub gives a Markdown file's headings."""
    anchors = set()
    for m in re.finditer(r"^#+ +(.+?) *$", text, re.M):
        a = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
        anchors.add(a.replace(" ", "-"))
    return anchors


def check_runbooks(repo):
    """Every alert has a runbook annotation naming a section of
    deploy/README.md that exists."""
    with open(os.path.join(repo, "deploy", "prometheus",
                           "sortd-rules.yml")) as f:
        groups = yaml.safe_load(f)["groups"]
    with open(os.path.join(repo, "deploy", "README.md")) as f:
        anchors = markdown_anchors(f.read())
    for g in groups:
        for rule in g["rules"]:
            if "alert" not in rule:
                continue
            link = rule.get("annotations", {}).get("runbook", "")
            m = re.fullmatch(r"deploy/README\.md#([\w-]+)", link)
            check(m and m.group(1) in anchors,
                  "alert %s: runbook %r is not a section of deploy/README.md"
                  % (rule["alert"], link))


def main():
    global SORTD
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--sortd", required=True)
    a = ap.parse_args()
    repo = os.path.abspath(a.repo)
    SORTD = a.sortd
    r = run(["yamllint", "--strict", "."], cwd=repo)
    check(r.returncode == 0, "yamllint:\n" + r.stdout + r.stderr)
    check_k8s(repo, a.sortd)
    check_docker(repo)
    check_compose(repo)
    prom = os.path.join(repo, "deploy", "prometheus")
    for args in (["check", "config", os.path.join(prom, "prometheus.yml")],
                 ["check", "rules", os.path.join(prom, "sortd-rules.yml")]):
        r = run(["promtool"] + args)
        check(r.returncode == 0, "promtool %s: %s" % (args[1], r.stdout +
                                                     r.stderr))
    r = run(["promtool", "test", "rules", "sortd-rules.test.yml"], cwd=prom)
    check(r.returncode == 0, "promtool test rules: " + r.stdout + r.stderr)
    check_runbooks(repo)
    check_prometheusrule_file(repo)
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures), file=sys.stderr)
        sys.exit(1)
    print("OK: deploy/ and Dockerfile pass every static check")


if __name__ == "__main__":
    main()
