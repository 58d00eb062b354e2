#!/usr/bin/env python3
"""compat/scheduling (QA_COMPARE=<this file> for model_config_driver.py): GET config (gRPC, port
QA_PORT_BASE+1) vs expected* files.
exit 0: matches one exactly; 3: matches one once instance_group is ignored
(expected files were generated on a GPU machine); 1: no match (closest diff printed)."""

import argparse
import difflib
import glob
import os

import tritonclient.grpc as g
from google.protobuf import text_format

ap = argparse.ArgumentParser()
ap.add_argument("--expected_dir")
ap.add_argument("--model")
a = ap.parse_args()
port = int(os.environ["QA_PORT_BASE"]) + 1
cfg = g.InferenceServerClient(f"127.0.0.1:{port}").get_model_config(a.model).config


def norm(m, drop_ig):
    m2 = type(m)()
    m2.CopyFrom(m)
    if drop_ig:
        m2.ClearField("instance_group")
    return text_format.MessageToString(m2)


best = None
for drop in (False, True):
    for e in sorted(glob.glob(os.path.join(a.expected_dir, "expected*"))):
        exp = type(cfg)()
        with open(e) as file:
            text_format.Merge(file.read(), exp)
        if norm(exp, drop) == norm(cfg, drop):
            print(("exact match " if not drop else "match ignoring instance_group ") + e)
            if drop:
                print(
                    "instance_group got:",
                    text_format.MessageToString(cfg.instance_group[0]).replace("\n", " ")
                    if cfg.instance_group
                    else None,
                    "| expected:",
                    text_format.MessageToString(exp.instance_group[0]).replace("\n", " ")
                    if exp.instance_group
                    else None,
                )
            raise SystemExit(3 if drop else 0)
        d = [
            line
            for line in difflib.unified_diff(
                norm(exp, True).splitlines(), norm(cfg, True).splitlines(), lineterm="", n=0
            )
            if not line.startswith(("---", "+++", "@@"))
        ]
        if best is None or len(d) < len(best[1]):
            best = (e, d)
print("closest", best[0], "(- expected, + got, instance_group ignored):")
print("\n".join(best[1][:40]))
raise SystemExit(1)
