"""Compares rayo's tokenizers with transformers, string for string.

Reads the JSON that tokenizer-parity (packages/workloads/src/text/) writes,
loads each vocabulary folder with AutoTokenizer.from_pretrained, and checks,
for every string: encode with and without the special tokens, the GGUF layout
of the same vocabulary, decode with special tokens kept and skipped, and the
chat template's text; @lenml/tokenizers' encodings are scored beside rayo's.
Prints the first mismatches of each kind and a summary; exits 1 on any
mismatch of rayo's.

    python tokenizer_parity.py tokenizer-parity.json --vocabularies tokenizers
"""

import argparse
import json
import os
import sys

from tokenizers import Tokenizer
from transformers import AutoTokenizer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", help="the JSON tokenizer-parity wrote")
    parser.add_argument("--vocabularies", default=None, help="folder of the vocabulary folders (default: tokenizers/ beside the results)")
    parser.add_argument("--show", type=int, default=5, help="mismatches shown per kind and vocabulary")
    args = parser.parse_args()
    with open(args.results, encoding="utf-8") as f:
        results = json.load(f)
    root = args.vocabularies or os.path.join(os.path.dirname(os.path.abspath(args.results)), "tokenizers")

    failed = False
    summary = []
    for vocabulary in results["vocabularies"]:
        name = vocabulary["name"]
        folder = os.path.join(root, vocabulary.get("folder", name))
        # Settings laid over the folder's tokenizer_config.json (rayo's side did the same).
        tok = AutoTokenizer.from_pretrained(folder, **vocabulary.get("configOverrides", {}))
        # A GGUF SentencePiece vocabulary encodes as SentencePiece and llama.cpp do (a ▁ before every
        # piece of text): the pipeline tokenizer.json saved, which transformers 5's LlamaTokenizer
        # class replaces. So the GGUF ids of such a vocabulary are checked against that file as the
        # tokenizers library runs it; every other vocabulary's against AutoTokenizer.
        saved = Tokenizer.from_file(os.path.join(folder, "tokenizer.json")) if type(tok).__name__ == "LlamaTokenizer" else None
        counts = {k: 0 for k in ("encode", "encode_plain", "gguf", "decode", "decode_skip", "lenml", "chat")}
        shown = {k: 0 for k in counts}

        def mismatch(kind, text, ours, theirs):
            counts[kind] += 1
            if shown[kind] < args.show:
                shown[kind] += 1
                print(f"[{name}] {kind} differs for {json.dumps(text, ensure_ascii=False)}")
                print(f"    rayo:         {json.dumps(ours, ensure_ascii=False)}")
                print(f"    transformers: {json.dumps(theirs, ensure_ascii=False)}")

        strings = vocabulary["strings"]
        for s in strings:
            text = s["text"]
            ids = tok.encode(text, add_special_tokens=True)
            plain = tok.encode(text, add_special_tokens=False)
            if s["ids"] != ids:
                mismatch("encode", text, s["ids"], ids)
            if s["idsPlain"] != plain:
                mismatch("encode_plain", text, s["idsPlain"], plain)
            gguf_reference = saved.encode(text, add_special_tokens=True).ids if saved else ids
            if s["ggufIds"] != gguf_reference:
                mismatch("gguf", text, s["ggufIds"], gguf_reference)
            if s["lenmlIds"] != ids:
                counts["lenml"] += 1
            # Decoding is checked on rayo's own ids, so that it stands apart from encoding.
            decoded = tok.decode(s["idsPlain"], skip_special_tokens=False)
            if s["decoded"] != decoded:
                mismatch("decode", text, s["decoded"], decoded)
            skipped = tok.decode(s["ids"], skip_special_tokens=True)
            if s["decodedSkip"] != skipped:
                mismatch("decode_skip", text, s["decodedSkip"], skipped)
        for chat in vocabulary["chats"]:
            rendered = tok.apply_chat_template(chat["messages"], tokenize=False, add_generation_prompt=True)
            if chat["rendered"] != rendered:
                mismatch("chat", chat["messages"], chat["rendered"], rendered)

        n = len(strings)
        rayo_failed = any(counts[k] for k in counts if k != "lenml")
        failed = failed or rayo_failed
        summary.append((name, n, len(vocabulary["chats"]), counts))

    print()
    print(f"{'vocabulary':<10} {'strings':>7}  {'encode':>8} {'no-spec':>8} {'gguf':>8} {'decode':>8} {'skip':>8} {'chat':>6} | {'@lenml':>8}")
    for name, n, chats, c in summary:
        ok = lambda k, total=n: f"{total - c[k]}/{total}"
        print(
            f"{name:<10} {n:>7}  {ok('encode'):>8} {ok('encode_plain'):>8} {ok('gguf'):>8} {ok('decode'):>8}"
            f" {ok('decode_skip'):>8} {ok('chat', chats):>6} | {ok('lenml'):>8}"
        )
    total = sum(sum(v for k, v in c.items() if k != "lenml") for _, _, _, c in summary)
    print(f"\nrayo vs transformers: {'all match' if not failed else f'{total} mismatches'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
