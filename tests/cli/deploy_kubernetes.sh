#!/usr/bin/env bash
# deploy_kubernetes.sh - the Kubernetes manifests of deploy/kubernetes/ (docs/kubernetes.md).
#
#   schemas      every manifest passes kubernetes-validate --strict (unknown fields are errors)
#                against the schemas of Kubernetes 1.29 and 1.37, bundled in the PyPI package
#                that scripts/setup.sh installs into build/venv (no network at test time)
#   the check    a DaemonSet with a misspelled field, and one with a wrong type, are refused:
#                the validator does look
#   consistency  the ConfigMap's msched.conf is one mschedd starts with; its socket lies in the
#                hostPath the DaemonSet and the example mount, and is the example's
#                MSCHED_SOCKET; the example's LD_PRELOAD names libmsched in the hostPath the
#                DaemonSet's init container fills; the metrics port of the configuration is the
#                container's port and its probes' path is the endpoint's; the example's
#                supplemental group is the socket_group; hostPID is on
. "$(dirname "$0")/../daemon/lib.sh"
K=$ROOT/deploy/kubernetes
VENV=$ROOT/build/venv
KV=$VENV/bin/kubernetes-validate
[ -x "$KV" ] || fail "no $KV: run scripts/setup.sh (it installs scripts/requirements-test.txt there)"
[ -x "$MSCHEDD" ] || fail "no mschedd at $MSCHEDD"
manifests=("$K"/*.yaml)
[ "${#manifests[@]}" -ge 4 ] || fail "expected at least 4 manifests in $K"

# ---- schemas ---------------------------------------------------------------------------------
for v in 1.29.0 1.37.0; do
    "$KV" --strict -k "$v" "${manifests[@]}" >"$T/kv.out" 2>&1 ||
        fail "kubernetes-validate $v: $(grep -v '^INFO' "$T/kv.out" | head -n 20)"
    n=$(grep -c "passed for resource" "$T/kv.out")
    [ "$n" -ge 6 ] || fail "only $n resources validated against $v: $(cat "$T/kv.out")"
done
pass "kubernetes-validate --strict, 1.29 and 1.37: $n resources"

# ---- the check -------------------------------------------------------------------------------
sed 's/hostPID: true/hostPid: true/' "$K/mschedd-daemonset.yaml" >"$T/typo.yaml"
if "$KV" --strict -k 1.37.0 "$T/typo.yaml" >"$T/typo.out" 2>&1; then
    fail "a misspelled field passed: $(cat "$T/typo.out")"
fi
sed 's/containerPort: 9400/containerPort: "metrics"/' "$K/mschedd-daemonset.yaml" >"$T/type.yaml"
if "$KV" -k 1.37.0 "$T/type.yaml" >"$T/type.out" 2>&1; then
    fail "a string port passed: $(cat "$T/type.out")"
fi
pass "a misspelled field and a wrong type are refused"

# ---- consistency -----------------------------------------------------------------------------
"$VENV/bin/python3" - "$K" "$T" <<'PY' || fail "consistency: $(cat "$T/py.err" 2>/dev/null)"
import os, sys, yaml
k, t = sys.argv[1], sys.argv[2]
docs = []
for f in sorted(os.listdir(k)):
    if f.endswith(".yaml"):
        docs += [d for d in yaml.safe_load_all(open(os.path.join(k, f))) if d]
def one(kind, name):
    m = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(m) == 1, (kind, name, len(m))
    return m[0]
def fail(msg):
    open(os.path.join(t, "py.err"), "w").write(msg)
    sys.exit(1)
conf_text = one("ConfigMap", "mschedd-config")["data"]["msched.conf"]
open(os.path.join(t, "k8s.conf"), "w").write(conf_text)
conf = {}
for line in conf_text.splitlines():
    line = line.strip()
    if line and not line.startswith("#"):
        key, _, val = line.partition("=")
        conf[key.strip()] = val.strip()
ds = one("DaemonSet", "mschedd")
pod = ds["spec"]["template"]["spec"]
if not pod.get("hostPID"):
    fail("the DaemonSet needs hostPID (pidfds of the clients)")
vols = {v["name"]: v for v in pod["volumes"]}
daemon = pod["containers"][0]
mounts = {m["mountPath"]: m["name"] for m in daemon["volumeMounts"]}
sock = conf["socket"]
sockdir = os.path.dirname(sock)
if sockdir not in mounts or "hostPath" not in vols[mounts[sockdir]]:
    fail("the socket's directory %s is not a hostPath mount of the daemon" % sockdir)
host_run = vols[mounts[sockdir]]["hostPath"]["path"]
cfg = daemon["command"][daemon["command"].index("--config") + 1]
if os.path.dirname(cfg) not in mounts or vols[mounts[os.path.dirname(cfg)]].get("configMap", {}).get("name") != "mschedd-config":
    fail("the daemon's --config %s is not the ConfigMap" % cfg)
port = int(conf["metrics_listen"].rsplit(":", 1)[1])
cport = {p["name"]: p["containerPort"] for p in daemon["ports"]}
if cport.get("metrics") != port:
    fail("metrics port %d, container port %s" % (port, cport))
for probe in ("livenessProbe", "readinessProbe"):
    if daemon[probe]["httpGet"]["path"] != "/metrics":
        fail("%s path" % probe)
init = pod["initContainers"][0]
imounts = {m["mountPath"]: m["name"] for m in init["volumeMounts"]}
host_lib = None
for path, name in imounts.items():
    if path in init["command"][-1]:
        host_lib = vols[name]["hostPath"]["path"]
if not host_lib:
    fail("the init container does not copy into a hostPath")
ex = one("Deployment", "train-shared")
epod = ex["spec"]["template"]["spec"]
evols = {v["name"]: v for v in epod["volumes"]}
c = epod["containers"][0]
env = {e["name"]: e.get("value") for e in c["env"]}
emounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
if env.get("MSCHED_SOCKET") != sock:
    fail("the example's MSCHED_SOCKET %s is not %s" % (env.get("MSCHED_SOCKET"), sock))
if evols[emounts[sockdir]]["hostPath"]["path"] != host_run:
    fail("the example mounts another socket directory")
pre = env.get("LD_PRELOAD", "")
libdir = os.path.dirname(pre)
if os.path.basename(pre) != "libmsched.so" or libdir not in emounts:
    fail("LD_PRELOAD %s is not libmsched.so in a mounted directory" % pre)
if evols[emounts[libdir]]["hostPath"]["path"] != host_lib:
    fail("the example's library directory is not the one the DaemonSet fills")
if int(conf["socket_group"]) not in epod["securityContext"].get("supplementalGroups", []):
    fail("the example's pods are not in socket_group %s" % conf["socket_group"])
PY
"$MSCHEDD" --foreground --config "$T/k8s.conf" --socket "$T/k.sock" --metrics-listen 127.0.0.1:0 \
    --socket-group "$(id -g)" >"$T/k.out" 2>&1 &
KP=$!
PIDS+=("$KP")
for i in $(seq 1 100); do
    grep -q "serving GPU 0 on $T/k.sock: budget 72GiB" "$T/k.out" 2>/dev/null && break
    kill -0 "$KP" 2>/dev/null || fail "mschedd with the ConfigMap's file: $(cat "$T/k.out")"
    sleep 0.05
done
grep -q "serving GPU 0 on $T/k.sock: budget 72GiB" "$T/k.out" || fail "mschedd: $(cat "$T/k.out")"
kill "$KP"
pass "the ConfigMap's msched.conf runs mschedd; socket, library, port and group agree across the manifests"
