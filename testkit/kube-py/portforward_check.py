"""The official Python `kubernetes` client against kitbag-vm's Kubernetes API fixture
(servers/vm/tests/kube_api.rs): typed list/read (the client's models parse every field),
a watch (`kubernetes.watch.Watch`), exec and port-forward over the WebSocket channel
protocols. Prints one JSON report as its last line.

usage: portforward_check.py KUBECONFIG NAMESPACE
"""

import json
import sys
import time

from kubernetes import client, config, watch
from kubernetes.stream import portforward, stream


def main():
    kubeconfig, ns = sys.argv[1], sys.argv[2]
    config.load_kube_config(config_file=kubeconfig)
    v1 = client.CoreV1Api()
    report = {}

    before = v1.list_namespaced_pod(ns)
    report["list_kind"] = before.kind
    rv = before.metadata.resource_version

    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="py-web", labels={"app": "py"}),
        spec=client.V1PodSpec(
            restart_policy="Never",
            containers=[
                client.V1Container(
                    name="web",
                    image="python:3.11",
                    command=["/usr/bin/python3", "-m", "http.server", "8080", "--bind", "127.0.0.1"],
                )
            ],
        ),
    )
    created = v1.create_namespaced_pod(ns, pod)
    report["created_uid"] = bool(created.metadata.uid)

    # Watch from the list's resourceVersion until the pod runs.
    events = []
    w = watch.Watch()
    for ev in w.stream(v1.list_namespaced_pod, ns, resource_version=rv, timeout_seconds=30,
                       label_selector="app=py"):
        obj = ev["object"]
        events.append([ev["type"], obj.status.phase if obj.status else None])
        ready = [c for c in (obj.status.conditions or []) if c.type == "Ready" and c.status == "True"]
        if obj.status and obj.status.phase == "Running" and ready:
            w.stop()
    report["watch_events"] = events

    got = v1.read_namespaced_pod("py-web", ns)
    report["read_phase"] = got.status.phase
    report["pod_ip"] = got.status.pod_ip
    report["container_running"] = got.status.container_statuses[0].state.running is not None

    out = stream(v1.connect_get_namespaced_pod_exec, "py-web", ns,
                 command=["sh", "-c", "echo from-exec; echo to-err >&2"],
                 stderr=True, stdin=False, stdout=True, tty=False)
    report["exec_output"] = out

    resp = stream(v1.connect_get_namespaced_pod_exec, "py-web", ns,
                  command=["sh", "-c", "exit 7"], stderr=True, stdin=False, stdout=True,
                  tty=False, _preload_content=False)
    resp.run_forever(timeout=20)
    report["exec_returncode"] = resp.returncode

    # The server needs a moment to listen.
    body = b""
    for _ in range(50):
        pf = portforward(v1.connect_get_namespaced_pod_portforward, "py-web", ns, ports="8080")
        sock = pf.socket(8080)
        sock.settimeout(10)
        try:
            sock.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
            body = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                body += chunk
        except OSError:
            pass
        sock.close()
        if pf.error(8080) is None and body.startswith(b"HTTP/1.0 200"):
            break
        time.sleep(0.1)
    report["portforward_status_line"] = body.split(b"\r\n", 1)[0].decode(errors="replace")

    pf = portforward(v1.connect_get_namespaced_pod_portforward, "py-web", ns, ports="8099")
    sock = pf.socket(8099)
    sock.settimeout(10)
    try:
        sock.sendall(b"x")
        sock.recv(10)
    except OSError:
        pass
    # The refusal comes on the port's error channel, after the data channel closed: on a
    # loaded machine that took longer than 5 s once. Wait up to 30 s (it ends at the error).
    for _ in range(600):
        if pf.error(8099) is not None:
            break
        time.sleep(0.05)
    report["refused_error"] = pf.error(8099)
    sock.close()

    v1.delete_namespaced_pod("py-web", ns, grace_period_seconds=1)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
