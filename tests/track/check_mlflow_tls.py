#!/usr/bin/env python3
"""MLflow over TLS with credentials: a real `mlflow server` on 127.0.0.1 behind nginx (Debian's
nginx-light) serving https with a certificate made here (a CA and a server certificate for
localhost / 127.0.0.1) and HTTP basic auth (a user and password), plus a second nginx server that
wants a bearer token. Then:
  - with MLFLOW_TRACKING_SERVER_CERT_PATH and the user and password: a 3-step run read back with
    the MLflow client (params, metric histories, artifacts through the proxy, FINISHED);
  - with MLFLOW_TRACKING_TOKEN against the token server: the same;
  - without the CA (the certificate cannot be verified): one warning that says what to set, and
    training finishes;
  - with a wrong password: one warning (HTTP 401, which variables to check), training finishes;
  - MLFLOW_TRACKING_INSECURE_TLS=true without the CA: accepted;
  - no password or token appears in any log, metrics.jsonl, config.json or `strata report`.

Usage: check_mlflow_tls.py STRATA SOURCE_DIR   (exit 77: mlflow, nginx or openssl missing; 1
under CI)
"""
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def skip(reason):
    if os.environ.get("CI"):
        print("FAILED (CI is set, so this is not a skip): " + reason)
        sys.exit(1)
    print("SKIP: " + reason)
    sys.exit(77)


try:
    import mlflow
    from mlflow.tracking import MlflowClient
except ImportError:
    skip("mlflow is not installed (pip install mlflow; scripts/install_deps.sh)")
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
if NGINX is None:
    skip("nginx is not installed (apt-get install nginx-light; scripts/install_deps.sh)")
if shutil.which("openssl") is None:
    skip("openssl is not installed")

strata, src = sys.argv[1], sys.argv[2]
work = tempfile.mkdtemp(prefix="strata_mlflow_tls_")
os.chmod(work, 0o755)  # nginx's workers read the password file
USER, PASSWORD, TOKEN = "strata-ci", "pw-7c1e9a4d", "tok-52b8e0f1c3"
SECRETS = [PASSWORD, TOKEN]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sh(*cmd, **kw):
    subprocess.run(cmd, check=True, capture_output=True, cwd=work, **kw)


# A CA and a server certificate for localhost and 127.0.0.1, signed by it.
sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
   "ca.pem", "-days", "2", "-subj", "/CN=strata test CA")
sh("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out",
   "server.csr", "-subj", "/CN=localhost")
with open(os.path.join(work, "san.ext"), "w") as f:
    f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
sh("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
   "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "san.ext")
hashed = subprocess.run(["openssl", "passwd", "-apr1", PASSWORD], check=True,
                        capture_output=True, text=True).stdout.strip()
with open(os.path.join(work, "htpasswd"), "w") as f:
    f.write(f"{USER}:{hashed}\n")

ml_port, basic_port, token_port = free_port(), free_port(), free_port()
for d in ("logs", "tmp"):
    os.makedirs(os.path.join(work, d), exist_ok=True)
proxy = f"""
    location / {{
        proxy_pass http://127.0.0.1:{ml_port};
        proxy_set_header Host $host;
        client_max_body_size 0;
        proxy_request_buffering off;
    }}"""
conf = f"""
daemon off;
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/logs/error.log;
{"user root;" if os.geteuid() == 0 else ""}
events {{ worker_connections 64; }}
http {{
    access_log {work}/logs/access.log;
    client_body_temp_path {work}/tmp/body;
    proxy_temp_path {work}/tmp/proxy;
    fastcgi_temp_path {work}/tmp/fastcgi;
    uwsgi_temp_path {work}/tmp/uwsgi;
    scgi_temp_path {work}/tmp/scgi;
    ssl_certificate {work}/server.pem;
    ssl_certificate_key {work}/server.key;
    server {{
        listen 127.0.0.1:{basic_port} ssl;
        auth_basic "mlflow";
        auth_basic_user_file {work}/htpasswd;
        {proxy}
    }}
    server {{
        listen 127.0.0.1:{token_port} ssl;
        if ($http_authorization != "Bearer {TOKEN}") {{ return 401; }}
        {proxy}
    }}
}}
"""
with open(os.path.join(work, "nginx.conf"), "w") as f:
    f.write(conf)

server_log = open(os.path.join(work, "server.log"), "w")
procs = []


def start(cmd, log):
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    procs.append(p)
    return p


def wait_up(url, proc, what, ctx=None):
    deadline = time.time() + 180
    while True:
        try:
            urllib.request.urlopen(url, timeout=2, context=ctx).read()
            return
        except urllib.error.HTTPError:
            return  # answering (401 from nginx is an answer)
        except Exception:
            if proc.poll() is not None or time.time() > deadline:
                server_log.flush()
                print(open(os.path.join(work, "server.log")).read()[-3000:])
                sys.exit(f"FAILED: {what} did not come up")
            time.sleep(0.5)


def train(run_dir, uri, env_extra):
    cmd = [strata, "train", os.path.join(src, "configs", "tiny.toml"),
           "--set", "model.n_layer=1", "--set", "model.d_model=32", "--set", "model.n_head=2",
           "--set", "model.vocab_size=256", "--set", "model.max_seq_len=32",
           "--set", "train.seq_len=32", "--set", "train.batch_size=2", "--set", "train.steps=3",
           "--set", "train.eval_every=0", "--set", "train.eval_batches=1",
           "--set", "data.source=synthetic", "--set", "sample.max_new_tokens=0",
           "--set", f"run.dir={run_dir}", "--set", f"mlflow.tracking_uri={uri}",
           "--set", "mlflow.experiment=strata-tls"]
    env = dict(os.environ, OMP_NUM_THREADS="2", MLFLOW_HTTP_REQUEST_MAX_RETRIES="1",
               MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR="0.1")
    for k in [k for k in env if k.startswith("MLFLOW_TRACKING_")]:
        env.pop(k)
    env.update(env_extra)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    with open(run_dir + ".log", "w") as f:
        f.write(p.stdout + p.stderr)
    if p.returncode != 0:
        sys.exit(f"FAILED: strata train exited {p.returncode}:\n{p.stderr[-3000:]}")
    assert len(open(os.path.join(run_dir, "metrics.jsonl")).readlines()) == 3
    return p


def mlflow_warnings(p):
    return [l for l in (p.stdout + p.stderr).splitlines()
            if "mlflow:" in l and "without MLflow" in l]


def read_back(client, run_dir):
    run_id = json.load(open(os.path.join(run_dir, "mlflow_run.json")))["run_id"]
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED", run.info.status
    assert run.data.params["train.steps"] == "3", run.data.params
    hist = client.get_metric_history(run_id, "loss")
    assert sorted(m.step for m in hist) == [1, 2, 3], [m.step for m in hist]
    names = {a.path for a in client.list_artifacts(run_id)}
    assert {"config.json", "metrics.jsonl"} <= names, names


try:
    start([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port",
           str(ml_port), "--workers", "1", "--backend-store-uri", f"sqlite:///{work}/mlflow.db",
           "--artifacts-destination", f"{work}/artifacts"], server_log)
    wait_up(f"http://127.0.0.1:{ml_port}/health", procs[-1], "mlflow server")
    nginx = start([NGINX, "-p", work, "-c", f"{work}/nginx.conf"], server_log)
    import ssl
    wait_up(f"https://127.0.0.1:{basic_port}/health", nginx, "nginx",
            ssl.create_default_context(cafile=os.path.join(work, "ca.pem")))
    print(f"mlflow {mlflow.__version__} on {ml_port}, nginx TLS + basic auth on {basic_port}, "
          f"TLS + bearer token on {token_port}")
    client = MlflowClient(tracking_uri=f"http://127.0.0.1:{ml_port}")
    ca = os.path.join(work, "ca.pem")
    basic = {"MLFLOW_TRACKING_USERNAME": USER, "MLFLOW_TRACKING_PASSWORD": PASSWORD}

    good = os.path.join(work, "run_basic")
    p = train(good, f"https://localhost:{basic_port}",
              dict(basic, MLFLOW_TRACKING_SERVER_CERT_PATH=ca))
    assert not mlflow_warnings(p), mlflow_warnings(p)
    read_back(client, good)
    print("https + basic auth + the CA: run read back (params, metrics, artifacts, FINISHED)")

    tok = os.path.join(work, "run_token")
    p = train(tok, f"https://127.0.0.1:{token_port}",
              {"MLFLOW_TRACKING_TOKEN": TOKEN, "MLFLOW_TRACKING_SERVER_CERT_PATH": ca})
    assert not mlflow_warnings(p), mlflow_warnings(p)
    read_back(client, tok)
    print("https + bearer token: run read back")

    insecure = os.path.join(work, "run_insecure")
    p = train(insecure, f"https://localhost:{basic_port}",
              dict(basic, MLFLOW_TRACKING_INSECURE_TLS="true"))
    assert not mlflow_warnings(p), mlflow_warnings(p)
    read_back(client, insecure)
    print("MLFLOW_TRACKING_INSECURE_TLS=true: accepted without the CA")

    bad_cert = os.path.join(work, "run_bad_cert")
    p = train(bad_cert, f"https://localhost:{basic_port}", basic)
    w = mlflow_warnings(p)
    assert len(w) == 1 and "MLFLOW_TRACKING_SERVER_CERT_PATH" in w[0] and \
        "training goes on without MLflow" in w[0], p.stderr[-2000:]
    print("unverifiable certificate: one warning:", w[0][:160])

    bad_pw = os.path.join(work, "run_bad_password")
    p = train(bad_pw, f"https://localhost:{basic_port}",
              {"MLFLOW_TRACKING_USERNAME": USER, "MLFLOW_TRACKING_PASSWORD": PASSWORD + "x",
               "MLFLOW_TRACKING_SERVER_CERT_PATH": ca})
    w = mlflow_warnings(p)
    assert len(w) == 1 and "HTTP 401" in w[0] and "MLFLOW_TRACKING_PASSWORD" in w[0], \
        p.stderr[-2000:]
    print("wrong password: one warning:", w[0][:160])

    # No credential anywhere strata writes: logs, run directories, reports.
    for d in (good, tok, insecure, bad_cert, bad_pw):
        subprocess.run([strata, "report", d], check=True, capture_output=True)
    leaks = []
    for path in glob.glob(os.path.join(work, "run_*"), recursive=False) + \
            glob.glob(os.path.join(work, "run_*", "**", "*"), recursive=True):
        if not os.path.isfile(path) or path.endswith(".safetensors"):
            continue
        data = open(path, "rb").read()
        leaks += [(path, s) for s in SECRETS + [PASSWORD + "x"] if s.encode() in data]
    assert not leaks, leaks
    print("no password or token in any log, metrics.jsonl, config.json or report")
finally:
    for p in reversed(procs):
        try:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(timeout=20)
        except Exception:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except Exception:
                pass
shutil.rmtree(work, ignore_errors=True)
print("mlflow over TLS: all checks passed")
