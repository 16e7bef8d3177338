"""The cache command fills what tasks read (download steps' inputs under OSWorld's controller's names,
cloud_file gold files under their `dest`, every evaluator variant's), from a local HTTP server standing in
for the file host; `--check` reports what is missing without downloading; and an episode reads gold files
from the cache only, never fetching a task's URL."""

import functools
import http.server
import json
import threading

import pytest

from rlanything_jax.scenarios.osworld import cache
from rlanything_jax.scenarios.osworld.client import OsWorldClient
from rlanything_jax.scenarios.osworld.evaluator import evaluate, getter_function
from rlanything_jax.scenarios.osworld.setup_steps import SetupContext, cached_download_path
from tests.scenarios.osworld.official_layout import variant_of


@pytest.fixture()
def file_host(tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    requests = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            requests.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(served)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{server.server_address[1]}", requests
    server.shutdown()
    server.server_close()


def _layout(root, base):
    task = {"id": "calc-1", "instruction": "Sum the column.",
            "config": [{"type": "download", "parameters": {"files": [
                {"url": f"{base}/in.xlsx", "path": "/home/user/in.xlsx"}]}}],
            "evaluator": {"func": "compare_table",
                          "result": {"type": "vm_file", "path": "/home/user/in.xlsx", "dest": "in.xlsx"},
                          "expected": {"type": "cloud_file", "path": f"{base}/gold.xlsx", "dest": "gold.xlsx"}}}
    variant = variant_of(task, {"evaluator1": "Sum it.", "evaluator2": "Average it."})
    variant["evaluator_list"]["evaluator2"]["expected"] = {
        "type": "cloud_file", "multi": True, "path": [f"{base}/avg.xlsx", f"{base}/gone.xlsx"],
        "dest": ["avg.xlsx", "../escape.xlsx"], "gives": [0, 1]}
    for folder, data in (("examples", task), ("new_examples", variant)):
        (root / folder / "libreoffice_calc").mkdir(parents=True)
        (root / folder / "libreoffice_calc" / "calc-1.json").write_text(json.dumps(data))
    (root / "list.json").write_text(json.dumps({"libreoffice_calc": ["calc-1"]}))


def test_the_cache_command_downloads_what_tasks_read_and_check_finds_what_is_missing(tmp_path, file_host, capsys):
    served, base, requests = file_host
    for name in ("in.xlsx", "gold.xlsx", "avg.xlsx"):
        (served / name).write_bytes(name.encode())
    task_dir, out = tmp_path / "evaluation_examples", tmp_path / "cache"
    _layout(task_dir, base)
    arguments = [f"--task_dir={task_dir}", "--tasks=list.json", f"--out={out}"]
    assert cache.main([*arguments, "--check"]) == 1
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == {
        "files": 4, "present_before": 0, "downloaded": 0, "missing": 4}
    assert not out.exists()

    assert cache.main(arguments) == 1            # gone.xlsx is not served
    assert set(requests) == {"/avg.xlsx", "/gold.xlsx", "/gone.xlsx", "/in.xlsx"}   # a 404 is logged twice
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == {
        "files": 4, "present_before": 0, "downloaded": 3, "missing": 1}
    upload = cached_download_path(out / "calc-1", f"{base}/in.xlsx", "/home/user/in.xlsx")
    assert upload.read_bytes() == b"in.xlsx"
    assert (out / "calc-1" / "gold.xlsx").read_bytes() == b"gold.xlsx"
    assert (out / "calc-1" / "avg.xlsx").read_bytes() == b"avg.xlsx"
    assert not (tmp_path / "escape.xlsx").exists() and not list(out.rglob("*.partial"))
    (served / "gone.xlsx").write_bytes(b"late")
    assert cache.main(arguments) == 0
    assert (out / "calc-1" / "escape.xlsx").read_bytes() == b"late"   # a dest is a file name in the task's folder
    assert cache.main([*arguments, "--check"]) == 0


def test_cloud_file_reads_the_cache_only_and_an_episode_never_downloads(tmp_path, file_host):
    served, base, requests = file_host
    (served / "gold.txt").write_bytes(b"gold")
    context = SetupContext(OsWorldClient("127.0.0.1:9", retries=1), "task-1", str(tmp_path / "cache"))
    context.cache_dir.mkdir(parents=True)
    spec = {"type": "cloud_file", "path": f"{base}/gold.txt", "dest": "../gold.txt"}
    evaluator = {"func": "exact_match", "result": {"type": "cache_file", "path": "answer.txt"},
                 "expected": spec}
    (context.cache_dir / "answer.txt").write_text("x")
    outcome = evaluate(evaluator, context, "DONE")
    assert outcome.score == 0.0 and "not in the task cache" in outcome.detail and requests == []
    assert not (context.cache_dir / "gold.txt").exists() and not (tmp_path / "cache" / "gold.txt").exists()
    (context.cache_dir / "gold.txt").write_bytes(b"gold")    # what the cache command writes for this dest
    # A dest is a file name in the task's folder: the host never reads outside the cache.
    assert getter_function("cloud_file")(context, spec) == str(context.cache_dir / "gold.txt")
    multi = {"type": "cloud_file", "multi": True, "path": [f"{base}/a", f"{base}/gold.txt"], "dest": ["a", "gold.txt"],
             "gives": [1]}
    assert getter_function("cloud_file")(context, multi) == str(context.cache_dir / "gold.txt")
