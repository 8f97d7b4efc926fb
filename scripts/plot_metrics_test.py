#!/usr/bin/python3
"""Tests of plot_metrics.py: its readers (metrics.jsonl lines, replays, the final line, fault
markers from `tandem drill`'s drill.json or a plain list) and the PNG it draws with Debian's
matplotlib (scripts/setup.sh installs it). Run by ctest."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot_metrics  # noqa: E402


class ReadersTest(unittest.TestCase):
    def write(self, name, text):
        path = os.path.join(self.dir.name, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def test_metrics_lines_replays_evals_and_final(self):
        lines = [
            {"step": 49, "loss": 0.6, "samples_per_sec": 1},
            {"step": 99, "loss": None, "samples_per_sec": 1},  # a non-finite loss is null
            {"step": 99, "auc": 0.7, "logloss": 0.5},
            {"step": 99, "loss": 0.55, "samples_per_sec": 1, "replay": True},
            {"final": True, "auc": 0.71, "model_checksum": "00"},
        ]
        text = "".join(json.dumps(line) + "\n" for line in lines) + '{"step": 1'  # torn
        steps, replays, evals, final = plot_metrics.read_metrics(self.write("m.jsonl", text))
        self.assertEqual(steps, [(49, 0.6)])
        self.assertEqual(replays, [(99, 0.55)])
        self.assertEqual(evals, [(99, 0.7)])
        self.assertEqual(final["auc"], 0.71)

    def test_faults_from_a_drill_report(self):
        report = {"faults": [
            {"fault": "kill worker:1 @step 300", "fired": True, "fired_at_step": 313},
            {"fault": "lose ps:1 @step 900", "fired": False, "fired_at_step": -1},
        ]}
        path = self.write("drill.json", json.dumps(report))
        self.assertEqual(plot_metrics.read_faults(path), [(313, "kill worker:1 @step 300")])

    def test_faults_from_a_list_and_bad_input(self):
        path = self.write("faults.json", json.dumps([{"step": 5, "label": "x"}]))
        self.assertEqual(plot_metrics.read_faults(path), [(5, "x")])
        with self.assertRaises(ValueError):
            plot_metrics.read_faults(self.write("bad.json", json.dumps([{"label": "no step"}])))
        with self.assertRaises(ValueError):
            plot_metrics.read_faults(self.write("obj.json", json.dumps({"nothing": 1})))


class PlotTest(unittest.TestCase):
    def test_writes_a_png_with_faults_marked(self):
        with tempfile.TemporaryDirectory() as d:
            metrics = os.path.join(d, "metrics.jsonl")
            with open(metrics, "w", encoding="utf-8") as f:
                for step in range(49, 1000, 50):
                    f.write(json.dumps({"step": step, "loss": 0.7 - step / 5000}) + "\n")
                    if (step + 1) % 250 == 0:
                        f.write(json.dumps({"step": step, "auc": 0.6 + step / 5000}) + "\n")
                f.write(json.dumps({"final": True, "auc": 0.8, "model_checksum": "00"}) + "\n")
            faults = os.path.join(d, "faults.json")
            with open(faults, "w", encoding="utf-8") as f:
                json.dump([{"step": 300, "label": "kill worker:1"}], f)
            png = os.path.join(d, "plot.png")
            script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plot_metrics.py")
            run = subprocess.run(["/usr/bin/python3", script, metrics, "-o", png, "--faults", faults],
                                 capture_output=True, text=True, check=False)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            with open(png, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
            self.assertGreater(os.path.getsize(png), 10000)


if __name__ == "__main__":
    unittest.main()
