"""The Python module against the moemem executable: the same JSON, the same errors.

Run with PYTHONPATH=<build>/python (ctest's python.unittest sets it and MOEMEM_CLI, the
executable). Expected values are the CLI's own output for the same flags: that is the contract.
"""

import json
import os
import re
import subprocess
import tempfile
import unittest

import moemem

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CLI = os.environ.get("MOEMEM_CLI") or os.path.join(os.path.dirname(os.path.dirname(moemem.__file__)), "..", "moemem")
PRESETS = os.path.join(REPO, "data", "models")


def cli(*args):
    """The executable's (exit code, stdout, stderr)."""
    p = subprocess.run([CLI, *[str(a) for a in args]], capture_output=True, text=True, check=False)
    return p.returncode, p.stdout, p.stderr


def cli_json(*args):
    code, out, err = cli(*args, "--format", "json")
    assert code in (0, 1), err
    return json.loads(out)


# Configurations as (keyword arguments, the same as CLI arguments).
CONFIGS = [
    (dict(model="deepseek-v3", tp=2, pp=16, dp=32, ep=8, sp=True, distributed_optimizer=True, recompute="full"),
     ["--model", "deepseek-v3", "--tp", "2", "--pp", "16", "--dp", "32", "--ep", "8", "--sp",
      "--distributed-optimizer", "--recompute", "full"]),
    (dict(model="mixtral-8x7b", tp=2, pp=4, dp=4, ep=2, sp=True, recompute="selective", gpu="h100-80g",
          micro_batch=2, seq_len=8192),
     ["--model", "mixtral-8x7b", "--tp", "2", "--pp", "4", "--dp", "4", "--ep", "2", "--sp", "--recompute",
      "selective", "--gpu", "h100-80g", "--micro-batch", "2", "--seq-len", "8192"]),
    (dict(model="llama-3.1-8b", profile="torchtitan", dp=8, compile=True, gpu_memory="80GiB"),
     ["--model", "llama-3.1-8b", "--profile", "torchtitan", "--dp", "8", "--compile", "--gpu-memory", "80GiB"]),
    (dict(model="deepseek-v3", profile="paper", tp=2, pp=16, dp=32, ep=8, etp=1, sp=True, zero=1,
          recompute="full", layers_per_stage=[4] * 15 + [1]),
     ["--model", "deepseek-v3", "--profile", "paper", "--tp", "2", "--pp", "16", "--dp", "32", "--ep", "8",
      "--etp", "1", "--sp", "--zero", "1", "--recompute", "full", "--layers-per-stage", ",".join(["4"] * 15 + ["1"])]),
]


class SameAsCli(unittest.TestCase):
    def test_analyze_dicts_equal_the_cli_json(self):
        for kwargs, args in CONFIGS:
            with self.subTest(args=" ".join(args)):
                report = moemem.analyze(**kwargs)
                self.assertIsInstance(report, moemem.Report)
                self.assertEqual(report.to_dict(), cli_json("analyze", *args))

    def test_analyze_text_is_the_cli_bytes(self):
        for _, args in CONFIGS:
            with self.subTest(args=" ".join(args)):
                code, out, _ = moemem.run("analyze", *args, "--format", "json")
                self.assertEqual(code, 0)
                self.assertEqual(out, cli("analyze", *args, "--format", "json")[1])

    def test_explain_count_and_models(self):
        kwargs, args = CONFIGS[0]
        self.assertEqual(moemem.explain(3, **kwargs), cli_json("explain", "--stage", "3", *args))
        self.assertEqual(moemem.count(model="qwen3-30b-a3b", by="layer"),
                         cli_json("count", "--model", "qwen3-30b-a3b", "--by", "layer"))
        self.assertEqual(moemem.models(), cli_json("models")["models"])

    def test_search_layouts_equal_the_cli(self):
        flags = ["--model", "mixtral-8x7b", "--gpus", "64", "--gpu", "h100-80g", "--global-batch", "512", "--top", "5"]
        layouts = moemem.search(model="mixtral-8x7b", gpus=64, gpu="h100-80g", global_batch=512, top=5)
        expected = cli_json("search", *flags)
        self.assertGreater(len(layouts), 0)
        self.assertEqual(list(layouts), expected["layouts"])  # not the whole document: it holds the run's seconds
        self.assertEqual(layouts.summary["pareto"], expected["pareto"])

    def test_search_with_no_fit_is_an_empty_list(self):
        layouts = moemem.search(model="deepseek-v3", gpus=8, gpu="h100-80g", global_batch=64)
        self.assertEqual(list(layouts), [])
        self.assertEqual(layouts.summary["feasible"], 0)


class Errors(unittest.TestCase):
    def test_bad_value_names_field_value_and_accepted(self):
        with self.assertRaises(moemem.InputError) as c:
            moemem.analyze(model="deepseek-v3", recompute="sometimes")
        e = c.exception
        self.assertIsInstance(e, ValueError)
        self.assertEqual(e.field, "--recompute")
        self.assertEqual(e.value, "sometimes")
        self.assertIn("full", e.accepted)
        # The CLI says the same, with exit code 2.
        code, _, err = cli("analyze", "--recompute", "sometimes")
        self.assertEqual(code, 2)
        self.assertEqual(err.splitlines()[0], "moemem: error: " + str(e))

    def test_unknown_model(self):
        with self.assertRaises(moemem.InputError) as c:
            moemem.count(model="no-such-model")
        self.assertEqual((c.exception.field, c.exception.value), ("--model", "no-such-model"))
        self.assertIn("deepseek-v3", c.exception.accepted)

    def test_unknown_keyword_is_a_command_line_error(self):
        with self.assertRaises(moemem.InputError) as c:
            moemem.analyze(no_such_flag=3)
        self.assertEqual(c.exception.field, "command line")
        self.assertIn("--no-such-flag", c.exception.accepted)

    def test_format_is_not_a_keyword(self):
        with self.assertRaises(TypeError):
            moemem.analyze(format="csv")

    def test_non_ascii_input_is_named_whole(self):
        # The message shows the offending character whole (a message cut inside a UTF-8
        # sequence could not be decoded: a UnicodeDecodeError instead of moemem.InputError).
        with self.assertRaises(moemem.InputError) as c:
            moemem.analyze(model="deepseek-v3", pp=2, pipeline_model_parallel_layout="Etttt|\u00e9")
        self.assertEqual(c.exception.field, "--pipeline-model-parallel-layout")
        self.assertIn("'\u00e9'", c.exception.value)
        self.assertIn("\u00e9", str(c.exception))

    def test_bad_dict_model(self):
        with open(os.path.join(PRESETS, "llama-3.1-8b.json"), encoding="utf-8") as f:
            config = json.load(f)
        config["num_hidden_layers"] = "many"
        with self.assertRaises(moemem.InputError) as c:
            moemem.analyze(model=config)
        # A dict is read as config.json text named "dict" (or its _name_or_path), key by key.
        self.assertEqual((c.exception.field, c.exception.value), ("dict: num_hidden_layers", '"many"'))
        self.assertEqual(c.exception.accepted, "an integer")


class ModelSources(unittest.TestCase):
    def test_preset_path_and_dict_give_the_same_stages(self):
        path = os.path.join(PRESETS, "qwen3-30b-a3b.json")
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        flags = dict(tp=2, pp=2, ep=4, dp=4, sp=True)
        by_preset = moemem.analyze(model="qwen3-30b-a3b", **flags)
        by_path = moemem.analyze(model=path, **flags)
        by_dict = moemem.analyze(model=config, **flags)
        self.assertEqual(by_path["model"]["name"], path)
        self.assertEqual(by_path.to_dict(), cli_json("analyze", "--model", path, "--tp", "2", "--pp", "2", "--ep", "4",
                                                     "--dp", "4", "--sp"))
        for other in (by_path, by_dict):
            self.assertEqual(other["stages"], by_preset["stages"])
            self.assertEqual(other["model"]["total_params"], by_preset["model"]["total_params"])
        self.assertEqual(moemem.count(model=config)["total_params"], moemem.count(model="qwen3-30b-a3b")["total_params"])


class Html(unittest.TestCase):
    def test_report_html_is_the_cli_page_with_one_bar_per_stage(self):
        kwargs, args = CONFIGS[1]
        report = moemem.analyze(**kwargs)
        page = report.to_html()
        self.assertEqual(page, cli("analyze", *args, "--format", "html")[1])
        self.assertEqual(len(re.findall(r'<rect class="stage"', page)), len(report["stages"]))
        self.assertNotIn("<script", page)
        self.assertIn("<iframe", report._repr_html_())

    def test_search_html(self):
        layouts = moemem.search(model="mixtral-8x7b", gpus=64, gpu="h100-80g", global_batch=512, top=5)
        page = layouts.to_html()
        self.assertEqual(len(re.findall(r'<circle class="point"', page)), len(layouts))

    def test_hostile_model_name_is_escaped(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, '<script>alert("x")</script>&.json')  # the '/' makes a directory
            os.makedirs(os.path.dirname(path))
            with open(os.path.join(PRESETS, "llama-3.1-8b.json"), encoding="utf-8") as src, open(path, "w") as dst:
                dst.write(src.read())
            page = moemem.analyze(model=path).to_html()
        self.assertNotIn("<script", page)
        self.assertIn("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;.json", page)


if __name__ == "__main__":
    unittest.main()
