#!/usr/bin/env python3
"""Prompts and output conversion for scripts/make-llama-reference.sh (standard library only).

  reference.py prompts OUT            write the prompt list: "NAME PARSE_SPECIAL HEX" per line
  reference.py json TXT JSON KEY=VALUE...
                                      check TXT (written by llama_reference greedy), print a
                                      summary and write the JSON twin; KEY=VALUE pairs go to the
                                      JSON's "llama_cpp"/"model"/"settings" objects (see below)
"""
import json
import sys

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chat(*turns, system=SYSTEM):
    """SmolLM2's ChatML template; ends with the assistant header (generation prompt)."""
    out = ""
    if system is not None:
        out += f"<|im_start|>system\n{system}<|im_end|>\n"
    roles = ["user", "assistant"]
    for i, t in enumerate(turns):
        out += f"<|im_start|>{roles[i % 2]}\n{t}<|im_end|>\n"
    return out + "<|im_start|>assistant\n"


LONG_DOC = (
    "Honeybees live in colonies that can contain tens of thousands of individuals. Each colony has a "
    "single queen, whose main job is to lay eggs, a few hundred male drones, and thousands of female "
    "worker bees. Workers change jobs as they age: young bees clean cells and feed larvae, middle-aged "
    "bees build wax comb and guard the entrance, and the oldest bees fly out to collect nectar, pollen, "
    "water and plant resins. Foragers communicate the location of good flowers with the waggle dance, "
    "in which the angle of the dance relative to gravity shows the direction of the food relative to "
    "the sun and the length of the waggle run shows the distance. Nectar is turned into honey by "
    "adding enzymes and evaporating water until the sugar concentration is high enough to prevent "
    "spoilage. In winter, the bees cluster together and shiver their flight muscles to keep the queen "
    "warm, living on the honey they stored during the summer. Honeybees pollinate many crops, "
    "including apples, almonds and blueberries, but colonies face threats from parasitic mites, "
    "viruses, pesticides and the loss of flowering habitat."
)

LONG_CODE = (
    "import os\nimport sys\nimport json\n\n\ndef load_config(path):\n"
    "    \"\"\"Load a JSON configuration file and return it as a dictionary.\"\"\"\n"
    "    if not os.path.exists(path):\n"
    "        raise FileNotFoundError(f\"config file not found: {path}\")\n"
    "    with open(path, \"r\", encoding=\"utf-8\") as f:\n        return json.load(f)\n\n\n"
    "def save_config(path, config):\n"
    "    \"\"\"Save a dictionary as a JSON configuration file.\"\"\"\n"
    "    with open(path, \"w\", encoding=\"utf-8\") as f:\n"
    "        json.dump(config, f, indent=2, sort_keys=True)\n\n\n"
    "def merge_configs(base, override):\n"
    "    \"\"\"Merge two configuration dictionaries; values in override win.\"\"\"\n"
    "    result = dict(base)\n    for key, value in override.items():\n"
    "        if isinstance(value, dict) and isinstance(result.get(key), dict):\n"
    "            result[key] = merge_configs(result[key], value)\n"
    "        else:\n            result[key] = value\n    return result\n\n\n"
    "def main(argv):\n    if len(argv) < 3:\n"
    "        print(\"usage: config.py BASE OVERRIDE\", file=sys.stderr)\n        return 2\n"
    "    base = load_config(argv[1])\n    override = load_config(argv[2])\n"
)

LONG_LIST = "Here is a list: " + ", ".join(f"item {i}" for i in range(1, 62)) + ","

# (name, parse_special, text). Names: [a-z0-9_], no spaces.
# Chosen from a larger pool for variety and for clear greedy choices: every prompt's smallest
# top-1/top-2 logit gap over the 32 steps is listed in the JSON ("min_top1_top2_gap"); prompts that
# hit end-of-generation within 32 steps were left out.
PROMPTS = [
    ("plain_wiki", 0, "Albert Einstein was a German-born theoretical physicist who"),
    ("plain_days", 0, "The days of the week are Monday, Tuesday, Wednesday,"),
    ("plain_letter", 0, "Dear Mr. Smith,\n\nThank you for your letter of May 3. I am writing to"),
    ("plain_single_token", 0, "import"),
    ("plain_special_literal", 0,
     "Tokens such as <|endoftext|> and <|im_start|>user are written here as plain text. The next line is"),
    ("plain_whitespace", 0, "Name:\tAlice\nAge:\t30\n\n    City:   Paris\n\nName:\tBob\n"),
    ("numbers_sequence", 0, "1, 2, 3, 4, 5, 6, 7, 8,"),
    ("numbers_squares", 0, "1, 4, 9, 16, 25, 36,"),
    ("numbers_hex", 0, "0x00, 0x01, 0x02, 0x03, 0x04, 0x05,"),
    ("numbers_table", 0, "| x | x^2 |\n|---|-----|\n| 1 | 1 |\n| 2 | 4 |\n| 3 | 9 |\n"),
    ("numbers_pi", 0, "On March 14, 2015 at 9:26:53, people celebrated Pi Day because pi = 3.14159265"),
    ("code_js", 0, "// Sort an array of numbers in ascending order\nfunction sortNumbers(arr) {\n"),
    ("code_cpp", 0, "#include <iostream>\n#include <vector>\n\nint main() {\n    std::vector<int> v = {3, 1, 2};\n"),
    ("unicode_emoji", 0, "My favorite emojis are 😀, 🎉, ❤️ and 👍. I use them when"),
    ("unicode_russian", 0, "Москва — столица России. Это самый большой город"),
    ("unicode_greek", 0, "Η Αθήνα είναι η πρωτεύουσα της Ελλάδας και"),
    ("unicode_chinese", 0, "中国的首都是北京。北京是一座历史悠久的城市，"),
    ("long_code", 0, LONG_CODE),
    ("long_list", 0, LONG_LIST),
    ("chat_explain", 1, chat("Explain how a car engine works, in detail.")),
    ("chat_email", 1, chat("Write a formal email to my manager asking for a day off next Friday.")),
    ("chat_code", 1, chat("Write a Python function that checks whether a number is prime, then explain how it works step by step.")),
    ("chat_story", 1, chat("Tell me a long story about a dragon who learns to cook.")),
    ("chat_no_system", 1, chat("Write a JavaScript function that reverses a string.", system=None)),
    ("chat_multiturn", 1, chat("Hi! Can you help me plan a trip?",
                               "Of course! Where would you like to go, and for how long?",
                               "Ten days in Japan in April. What should I see?")),
    ("chat_long_doc", 1, chat("Give this text a title and then summarize it in three sentences.\n\n" + LONG_DOC)),
]


def cmd_prompts(out_path):
    names = set()
    with open(out_path, "w", encoding="ascii") as f:
        for name, ps, text in PROMPTS:
            assert name not in names and name.replace("_", "").isalnum(), name
            names.add(name)
            f.write(f"{name} {ps} {text.encode('utf-8').hex()}\n")


def parse_txt(path):
    meta, prompts = {}, []
    by_index = {}
    with open(path, encoding="ascii") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            w = line.split(" ")
            kind = w[0]
            if kind == "meta":
                meta[w[1]] = w[2]
            elif kind == "prompt":
                i, n = int(w[1]), int(w[4])
                ids = [int(x) for x in w[5:]]
                assert len(ids) == n, line[:80]
                p = {"index": i, "name": w[2], "parse_special": w[3] == "1", "prompt_ids": ids, "steps": []}
                assert i == len(prompts)
                prompts.append(p)
                by_index[i] = p
            elif kind == "text":
                by_index[int(w[1])]["prompt"] = bytes.fromhex(w[2] if len(w) > 2 else "").decode("utf-8")
            elif kind == "step":
                p = by_index[int(w[1])]
                step, tok = int(w[2]), int(w[3])
                assert step == len(p["steps"])
                top = [[int(w[4 + 2 * k]), float(w[5 + 2 * k])] for k in range(5)]
                assert top[0][0] == tok
                p["steps"].append({"token": tok, "top5": top})
            elif kind == "output":
                p = by_index[int(w[1])]
                assert int(w[2]) == len(p["steps"])
                p["stopped_at_eog"] = w[3] == "1"
                raw = bytes.fromhex(w[4] if len(w) > 4 else "")
                p["continuation"] = raw.decode("utf-8", errors="replace")
                p["continuation_hex"] = raw.hex()
            else:
                raise ValueError("unknown line kind: " + kind)
    return meta, prompts


def cmd_json(txt_path, json_path, kv):
    meta, prompts = parse_txt(txt_path)
    n_steps = int(meta["n_steps"])
    assert int(meta["n_prompts"]) == len(prompts)
    doc = {
        "format": "troupe-llama-reference-v1",
        "description": "Greedy decoding reference from llama.cpp; see tests/fixtures/llama_reference/README.md",
        "llama_cpp": {k[len("llama_cpp."):]: v for k, v in kv.items() if k.startswith("llama_cpp.")},
        "model": {k[len("model."):]: v for k, v in kv.items() if k.startswith("model.")},
        "settings": {
            "n_steps": n_steps,
            "n_threads": int(meta["n_threads"]),
            "add_bos": meta["add_bos"] == "1",
            "n_vocab": int(meta["n_vocab"]),
            "kv_cache_type": meta["kv_type"],
            "flash_attn": meta["flash_attn"] == "1",
            "sampling": "greedy (argmax of raw logits, ties to the smaller id)",
            "prompt_eval": "whole prompt in one batch, then one token per decode",
        },
        "prompts": [],
    }
    full, eog = 0, []
    print(f"{'#':>2} {'name':<18} {'ptoks':>5} {'steps':>5} {'min gap':>8}  continuation")
    for p in prompts:
        gaps = [s["top5"][0][1] - s["top5"][1][1] for s in p["steps"]]
        p["min_top1_top2_gap"] = round(min(gaps), 6)
        if len(p["steps"]) == n_steps and not p["stopped_at_eog"]:
            full += 1
        if p["stopped_at_eog"]:
            eog.append(p["name"])
        # compact: steps as [token, [[id, logit] x5]]
        entry = {
            "index": p["index"],
            "name": p["name"],
            "parse_special": p["parse_special"],
            "prompt": p["prompt"],
            "prompt_ids": p["prompt_ids"],
            "tokens": [s["token"] for s in p["steps"]],
            "top5": [s["top5"] for s in p["steps"]],
            "stopped_at_eog": p["stopped_at_eog"],
            "continuation": p["continuation"],
            "continuation_hex": p["continuation_hex"],
            "min_top1_top2_gap": p["min_top1_top2_gap"],
        }
        doc["prompts"].append(entry)
        c = p["continuation"].replace("\n", "\\n")
        print(f"{p['index']:>2} {p['name']:<18} {len(p['prompt_ids']):>5} {len(p['steps']):>5} "
              f"{p['min_top1_top2_gap']:>8.4f}  {c[:60]}")
    with open(json_path, "w", encoding="utf-8") as f:
        # one prompt per block, steps one per line: compact but diff-friendly
        f.write("{\n")
        for k in ("format", "description", "llama_cpp", "model", "settings"):
            f.write(f"  {json.dumps(k)}: {json.dumps(doc[k], ensure_ascii=False)},\n")
        f.write('  "prompts": [\n')
        for pi, e in enumerate(doc["prompts"]):
            f.write("    {\n")
            keys = list(e.keys())
            for ki, k in enumerate(keys):
                sep = "," if ki + 1 < len(keys) else ""
                if k == "top5":
                    f.write('      "top5": [\n')
                    for si, t in enumerate(e[k]):
                        f.write("        " + json.dumps(t) + ("," if si + 1 < len(e[k]) else "") + "\n")
                    f.write("      ]" + sep + "\n")
                else:
                    f.write(f"      {json.dumps(k)}: {json.dumps(e[k], ensure_ascii=False)}{sep}\n")
            f.write("    }" + ("," if pi + 1 < len(doc["prompts"]) else "") + "\n")
        f.write("  ]\n}\n")
    # self-check: the JSON parses and round-trips the prompts and numbers
    with open(json_path, encoding="utf-8") as f:
        back = json.load(f)
    for a, b in zip(back["prompts"], prompts):
        assert a["prompt"] == b["prompt"] and a["prompt_ids"] == b["prompt_ids"]
        assert a["tokens"] == [s["token"] for s in b["steps"]]
        assert a["top5"] == [s["top5"] for s in b["steps"]]
    print(f"summary: {len(prompts)} prompts, {full} with all {n_steps} steps "
          f"({sum(len(p['steps']) for p in prompts)} steps in all); stopped at end-of-generation: "
          f"{', '.join(eog) if eog else 'none'}")
    ok = len(prompts) >= 20 and full >= 20
    if not ok:
        print("summary: FAIL: want 20+ prompts with all steps", file=sys.stderr)
    return 0 if ok else 1


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "prompts":
        cmd_prompts(sys.argv[2])
        return 0
    if len(sys.argv) >= 4 and sys.argv[1] == "json":
        kv = dict(a.split("=", 1) for a in sys.argv[4:])
        return cmd_json(sys.argv[2], sys.argv[3], kv)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
