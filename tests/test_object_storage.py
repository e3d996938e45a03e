"""From ``s3://`` input to ``s3://`` output, against moto's S3 server on a loopback port.

The Ray run is an ``lwm`` process with the endpoint in ``FSSPEC_S3_ENDPOINT_URL`` (fsspec's
per-protocol environment config) and dummy credentials in the usual AWS variables; its workers get
them because the local Ray instance it starts inherits the environment. The local run is the same
command run in this process, with the endpoint in fsspec's config and the same credentials.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import subprocess

import pyarrow.parquet as pq
import pytest

from tests.helpers import LWM, clean_env, config_toml, lwm_in_process, write_corpus

s3fs = pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")
BUCKET = "lwm-test"
KEY_ID = "AKIDLWMTEST" + secrets.token_hex(6).upper()
SECRET = "lwm-secret-" + secrets.token_hex(16)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    env = {**clean_env(), "AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_DEFAULT_REGION": "us-east-1", "FSSPEC_S3_ENDPOINT_URL": endpoint}
    fs = s3fs.S3FileSystem(key=KEY_ID, secret=SECRET, endpoint_url=endpoint, skip_instance_cache=True)
    fs.mkdir(BUCKET)
    # two small files (one task) and one file of two byte ranges: three ingest tasks, a split file
    corpus = write_corpus(tmp_path_factory.mktemp("corpus") / "in", files=2, per_file=25, big=60)
    fs.put(str(corpus) + "/", f"{BUCKET}/in/", recursive=True)
    toml = config_toml(tmp_path_factory.mktemp("cfg") / "c.toml")
    try:
        yield {"fs": fs, "env": env, "endpoint": endpoint, "corpus": corpus, "toml": toml}
    finally:
        server.stop()


def _lwm_run(s3, out: str, *extra: str) -> subprocess.CompletedProcess:
    cmd = [LWM, "run", "--input", f"s3://{BUCKET}/in", "--out", out, "--config", str(s3["toml"]),
           "--progress", "off", *extra]
    return subprocess.run(cmd, env=s3["env"], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def local_run(s3) -> str:
    import fsspec

    with pytest.MonkeyPatch.context() as mp:
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
            mp.setenv(key, s3["env"][key])
        mp.setitem(fsspec.config.conf, "s3", {"endpoint_url": s3["endpoint"]})
        proc = lwm_in_process("run", "--input", f"s3://{BUCKET}/in", "--out", f"s3://{BUCKET}/out-local",
                              "--config", str(s3["toml"]), "--progress", "off", "--executor", "local")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return f"{BUCKET}/out-local"


def _objects(fs, root: str) -> dict[str, bytes]:
    return {p[len(root) + 1:]: fs.cat_file(p) for p in sorted(fs.find(root))}


@pytest.fixture
def s3_here(s3, monkeypatch):
    """This process reaches the server as `lwm` does: credentials in the AWS variables, the endpoint in fsspec's
    config."""
    import fsspec

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": s3["endpoint"]})
    return s3


def test_a_run_from_s3_to_s3_writes_a_complete_output(s3, local_run):
    fs = s3["fs"]
    objects = _objects(fs, local_run)
    assert "_SUCCESS" in objects and "manifest.json" in objects
    assert not [k for k in objects if ".tmp-" in k]
    manifest = json.loads(objects["manifest.json"])
    assert {i["uri"] for i in manifest["inputs"]} == {f"s3://{BUCKET}/in/{p.name}" for p in s3["corpus"].iterdir()}
    # every shard the manifest lists is there with its recorded size, digest (hashed as it was uploaded) and rows
    for shard in manifest["shards"]:
        data = objects[shard["path"]]
        assert len(data) == shard["bytes"] and hashlib.sha256(data).hexdigest() == shard["sha256"]
        assert pq.read_metadata(fs.open(f"{local_run}/{shard['path']}", "rb")).num_rows == shard["rows"]
    # the split file was read in ranges, straight from the object store
    assert json.loads(objects["_timings.json"])["scan"]["tasks"] >= 2
    # every task marker records the sizes its files have in the store (a rerun checks them; a wrong one redoes it)
    recorded = {rel: size for k, v in objects.items() if k.startswith("_tasks/") and k.endswith(".json")
                for rel, size in (json.loads(v).get("outputs") or {}).items()}
    assert any(rel.startswith("_work/samples/") for rel in recorded)
    assert {rel: len(objects[rel]) for rel in recorded} == recorded


def test_the_training_reader_reads_the_shards_back_from_s3(s3_here, local_run):
    training = pytest.importorskip("training")
    s3 = s3_here
    manifest = json.loads(s3["fs"].cat_file(f"{local_run}/manifest.json"))
    for pool in ("cpt", "sft", "eval"):
        expected = sorted(r for s in manifest["shards"] if s["path"].startswith(f"shards/{pool}/")
                          for r in pq.read_table(s3["fs"].open(f"{local_run}/{s['path']}", "rb"),
                                                 columns=["sample_id"]).column("sample_id").to_pylist())
        dataset = training.ShardDataset(f"s3://{local_run}/shards/{pool}", shuffle=False, rank=0, world_size=1)
        samples = list(dataset)
        assert sorted(s["sample_id"] for s in samples) == expected and expected, pool
        assert all(len(s["input_ids"]) == len(s["loss_weight"]) > 0 for s in samples)


def test_ray_on_s3_gives_the_same_objects_and_no_credential_reaches_an_output(s3, local_run):
    proc = _lwm_run(s3, f"s3://{BUCKET}/out-ray", "--executor", "ray", "--num-cpus", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    fs = s3["fs"]
    local, ray = _objects(fs, local_run), _objects(fs, f"{BUCKET}/out-ray")
    compared = [k for k in local if k.split("/")[0] in ("shards", "trajectories", "quarantine", "raw")]
    assert len(compared) >= 10
    assert {k: ray.get(k) for k in compared} == {k: local[k] for k in compared}
    assert json.loads(ray["manifest.json"])["shards"] == json.loads(local["manifest.json"])["shards"]
    for root, objects in ((local_run, local), (f"{BUCKET}/out-ray", ray)):
        for key, data in objects.items():
            texts = [data]
            if key.endswith(".parquet"):  # compressed pages would hide a string from a byte scan
                texts.append(json.dumps(pq.read_table(fs.open(f"{root}/{key}", "rb")).to_pylist(),
                                        default=str).encode())
            for text in texts:
                assert KEY_ID.encode() not in text and SECRET.encode() not in text, key
    for stream in (proc.stdout, proc.stderr):
        assert KEY_ID not in stream and SECRET not in stream


def test_a_file_another_process_wrote_after_a_listing_here_is_read(s3_here):
    """A worker that listed a folder (a sample task's clean-up lists all of ``_work/samples``) and later reads a
    file another worker wrote there since (a shard task reading its bucket) must find it. s3fs keeps listings,
    and a later `find` does not replace one it holds, so a cached output filesystem read the stale listing and
    failed with FileNotFoundError on a file that was there."""
    from pipeline.outputs import out_fs

    folder = f"{BUCKET}/out-listing/_work/samples/sft/b00000"
    other = s3_here["fs"]  # another process's filesystem: its own listings
    other.pipe_file(f"{folder}/aaaa.arrow", b"first")
    fs, root = out_fs(f"s3://{BUCKET}/out-listing")
    assert fs.find(f"{root}/_work/samples") == [f"{folder}/aaaa.arrow"]
    other.pipe_file(f"{folder}/bbbb.arrow", b"second")
    fs, root = out_fs(f"s3://{BUCKET}/out-listing")
    files = sorted(fs.find(folder))  # as a shard task lists its bucket, then opens each file
    assert files == [f"{folder}/aaaa.arrow", f"{folder}/bbbb.arrow"]
    opened = []
    for p in files:
        with fs.open(p, "rb") as f:
            opened.append(f.read())
    assert opened == [b"first", b"second"]


def test_a_missing_object_ends_a_command_with_a_line_that_says_so(s3):
    """s3fs raises FileNotFoundError with the key alone; the command's one error line names what failed."""
    from pipeline.errors import error_line

    missing = f"{BUCKET}/out-missing/_work/samples/sft/b00000/x.arrow"
    with pytest.raises(FileNotFoundError) as raised:
        s3["fs"].open(missing, "rb")
    assert error_line(raised.value) == (f"No such file or directory: {missing}", 2)


def test_the_inputs_keep_their_listings_while_the_output_keeps_none(s3_here, caplog):
    """The output's filesystem is an instance of its own: the one that reads the inputs (the same bucket and
    options) still sizes the files it listed without a request per file."""
    import logging

    from pipeline.outputs import out_fs
    from stages.ingest.reading import filesystem

    fs_in, path = filesystem(f"s3://{BUCKET}/in")
    listed = fs_in.ls(path, detail=True)
    out, root = out_fs(f"s3://{BUCKET}/out-inputs")
    assert len(listed) == 3
    caplog.set_level(logging.INFO, logger="werkzeug")
    caplog.clear()
    assert [fs_in.size(e["name"]) for e in listed] == [e["size"] for e in listed]
    assert not [m for m in caplog.messages if f"/{BUCKET}/in/" in m]
    out.pipe_file(f"{root}/x.json", b"{}")
    caplog.clear()
    assert out.size(f"{root}/x.json") == 2
    assert [m for m in caplog.messages if f"HEAD /{BUCKET}/out-inputs/x.json" in m]  # asked, not remembered


def test_what_the_output_writes_is_seen_by_the_shared_instance_that_listed_it_before(s3_here):
    """In one process (a notebook: a run, a read of its shards, a second run): the shared instance, which had
    listed the output folder, sees the files the output's own instance wrote there since."""
    import fsspec

    from pipeline.outputs import out_fs, write_bytes_atomic

    shared, folder = fsspec.core.url_to_fs(f"s3://{BUCKET}/out-shared/shards")
    out, root = out_fs(f"s3://{BUCKET}/out-shared")
    write_bytes_atomic(out, f"{root}/shards/a.parquet", b"first")
    assert shared.ls(folder, detail=False) == [f"{folder}/a.parquet"]
    write_bytes_atomic(out, f"{root}/shards/a.parquet", b"second!")
    write_bytes_atomic(out, f"{root}/shards/b.parquet", b"new")
    assert shared.ls(folder, detail=False) == [f"{folder}/a.parquet", f"{folder}/b.parquet"]
    assert shared.size(f"{folder}/a.parquet") == 7


def test_an_output_bucket_that_does_not_exist_is_one_line_and_is_not_created(s3_here, tmp_path):
    import fsspec

    for command in (["run", "--executor", "local", "--progress", "off", "-i", f"s3://{BUCKET}/in",
                     "-o", "s3://no-such-bucket/out"],
                    ["export", "verl", "s3://no-such-bucket-2/run", "s3://no-such-bucket-3/rl"]):
        proc = lwm_in_process(*command)
        assert proc.returncode == 2, proc.stderr
    proc = lwm_in_process("run", "--executor", "local", "--progress", "off", "-i", f"s3://{BUCKET}/in",
                          "-o", "s3://no-such-bucket/out")
    assert proc.stderr.strip().splitlines()[-1] == ("lwm: error: s3://no-such-bucket/out: the bucket no-such-bucket "
                                                     "does not exist; lwm writes into a bucket, it does not create one")
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    assert not fs.exists("no-such-bucket") and not fs.exists("no-such-bucket-3")


@pytest.fixture
def frozen_endpoint():
    """A loopback port that accepts connections and never answers (a hung proxy or store)."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        server.close()
        for conn in held:
            conn.close()


def _probe_run(tmp_path, endpoint: str, source: str, out: str, wait: str = "1") -> subprocess.CompletedProcess:
    env = {**clean_env(), "AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_DEFAULT_REGION": "us-east-1", "FSSPEC_S3_ENDPOINT_URL": endpoint, "LWM_STORE_WAIT_S": wait}
    # the bound is a few seconds; botocore's and s3fs's own retries of even 0.5-second waits take longer than 20 s
    return subprocess.run([LWM, "run", "-i", source, "-o", out, "--executor", "local", "--progress", "off"],
                          env=env, capture_output=True, text=True, timeout=20)


@pytest.mark.parametrize("inside", ["input", "output"])
def test_a_store_that_never_answers_is_one_line_within_the_wait(frozen_endpoint, tmp_path, inside):
    """Without a bound, botocore's and s3fs's retries of 60-second waits hold such a run for many minutes with
    nothing printed; lwm asks the store before the run and stops after LWM_STORE_WAIT_S seconds. A credential in
    the input's URL stays out of the line."""
    corpus = write_corpus(tmp_path / "in", files=1, per_file=3)
    source, out = (("s3://frozen/in?X-Amz-Signature=SIGSECRET123", str(tmp_path / "out")) if inside == "input"
                   else (str(corpus), "s3://frozen/out"))
    proc = _probe_run(tmp_path, frozen_endpoint, source, out)
    assert proc.returncode == 2, proc.stderr
    shown = "s3://frozen/in" if inside == "input" else out
    assert proc.stderr.strip().splitlines()[-1] == (
        f"lwm: error: {shown}: no answer from the object store at {frozen_endpoint} (asked twice, 1 s in all) "
        "(ReadTimeoutError); check the endpoint (FSSPEC_S3_ENDPOINT_URL, AWS_ENDPOINT_URL, ~/.aws/config) and the "
        "network, or give it longer with LWM_STORE_WAIT_S")
    assert "SIGSECRET123" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_store_nothing_listens_for_is_one_line(tmp_path):
    import socket

    with socket.socket() as sock:  # a port that was free a moment ago: connections to it are refused
        sock.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{sock.getsockname()[1]}"
    proc = _probe_run(tmp_path, endpoint, "s3://nobody/in", str(tmp_path / "out"), wait="20")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"lwm: error: s3://nobody/in: the object store at {endpoint} could not be reached (EndpointConnectionError); "
        "check the endpoint (FSSPEC_S3_ENDPOINT_URL, AWS_ENDPOINT_URL, ~/.aws/config) and the network")


def test_an_unreadable_store_wait_is_one_line(tmp_path):
    corpus = write_corpus(tmp_path / "in", files=1, per_file=3)
    env = {**clean_env(), "LWM_STORE_WAIT_S": "soon"}
    proc = subprocess.run([LWM, "run", "-i", str(corpus), "-o", "s3://any/out", "--executor", "local"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "lwm: error: LWM_STORE_WAIT_S='soon': give seconds (0: no bound on the wait for an object store's answer)")


@pytest.mark.parametrize("command", [["hist"], ["show", "--index", "0"], ["export", "trl", "{run}", "{out}"],
                                     ["train", "--shards", "{run}/shards/cpt", "--max-steps", "1"]],
                         ids=lambda command: command[0])
def test_the_commands_that_read_a_run_on_a_store_that_never_answers_are_one_line(frozen_endpoint, tmp_path, command):
    if command[0] == "train":
        pytest.importorskip("torch")
    env = {**clean_env(), "AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_DEFAULT_REGION": "us-east-1", "FSSPEC_S3_ENDPOINT_URL": frozen_endpoint, "LWM_STORE_WAIT_S": "1"}
    run = "s3://frozen/run"
    args = [a.format(run=run, out=str(tmp_path / "trl")) for a in command]
    if not any("{run}" in a for a in command):
        args.insert(1, run)
    shown = next(a for a in args if a.startswith(run))  # the run, or the shards of it the command was given
    # unbounded, botocore's retries of 60-second waits hold each for minutes; `lwm train` first imports torch
    proc = subprocess.run([LWM, *args], env=env, capture_output=True, text=True, timeout=60 if "train" in args else 20)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(
        f"lwm: error: {shown}: no answer from the object store at {frozen_endpoint}")


@pytest.fixture
def refusing_store(s3):
    """The same server judging every request by IAM policies (moto's IAM simulation), for a user whose policy
    `user(statements)` gives: the env of an `lwm` process with that user's credentials. Buckets and users are
    made first, with the simulation off; it is on for the rest of the test."""
    import boto3
    from moto import settings
    from moto.core.authorization import ActionAuthenticatorMixin

    admin = {"aws_access_key_id": KEY_ID, "aws_secret_access_key": SECRET, "region_name": "us-east-1",
             "endpoint_url": s3["endpoint"]}
    iam = boto3.client("iam", **admin)
    for bucket in ("lwm-locked",):
        if not s3["fs"].exists(bucket):
            s3["fs"].mkdir(bucket)
            s3["fs"].put(str(s3["corpus"]) + "/", f"{bucket}/in/", recursive=True)

    def user(statements: list[dict]) -> dict[str, str]:
        name = "lwm-" + secrets.token_hex(4)
        iam.create_user(UserName=name)
        iam.put_user_policy(UserName=name, PolicyName="lwm", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": statements}))
        key = iam.create_access_key(UserName=name)["AccessKey"]
        return {**s3["env"], "AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}

    before = settings.INITIAL_NO_AUTH_ACTION_COUNT, ActionAuthenticatorMixin.request_count
    users = {
        # lists and reads the test bucket, writes nothing
        "read-only": user([{"Effect": "Allow", "Action": ["s3:List*", "s3:HeadBucket", "s3:GetObject", "s3:HeadObject"],
                            "Resource": [f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/*"]}]),
        # everything on the test bucket, nothing on the locked one
        "test-bucket": user([{"Effect": "Allow", "Action": ["s3:*"],
                              "Resource": [f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/*"]}]),
        # everything on the test bucket but reading its input files
        "no-input-reads": user([{"Effect": "Allow", "Action": ["s3:*"],
                                 "Resource": [f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/*"]},
                                {"Effect": "Deny", "Action": ["s3:GetObject"],
                                 "Resource": [f"arn:aws:s3:::{BUCKET}/in/*"]}]),
    }
    settings.INITIAL_NO_AUTH_ACTION_COUNT, ActionAuthenticatorMixin.request_count = 0, 0
    try:
        yield users
    finally:
        settings.INITIAL_NO_AUTH_ACTION_COUNT, ActionAuthenticatorMixin.request_count = before


@pytest.mark.parametrize(("who", "source", "out", "shown", "access"), [
    ("read-only", f"s3://{BUCKET}/in", f"s3://{BUCKET}/out-refused", f"s3://{BUCKET}/out-refused", "write"),
    ("test-bucket", f"s3://{BUCKET}/in", "s3://lwm-locked/out", "s3://lwm-locked/out", "list"),
    ("test-bucket", "s3://lwm-locked/in", "{tmp}/out", "run.input (--input): s3://lwm-locked/in", "list"),
    ("no-input-reads", f"s3://{BUCKET}/in", "{tmp}/out", f"s3://{BUCKET}/in/", "read"),
])
def test_a_location_the_store_refuses_is_one_line_naming_it_and_the_right_refused(
        refusing_store, tmp_path, who, source, out, shown, access):
    """s3fs says "Access Denied" alone: the line said neither which location nor whether lwm was refused a
    listing, a read or a write there."""
    out = out.format(tmp=tmp_path)
    proc = subprocess.run([LWM, "run", "-i", source, "-o", out, "--executor", "processes", "--num-cpus", "2",
                           "--progress", "off"], env=refusing_store[who], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(f"lwm: error: {shown}"), line
    assert f": the object store refused to let lwm {access} there (" in line, line
    assert line.endswith(f"; the credentials in use may not {access} there"), line
