"""Score extractions of trafilatura's evaluation corpus with the corpus's own scoring code.

Run by servers/web/benches/extract/public.rs (`cargo bench -p kitbag-web --bench extract`):
    score_trafilatura_eval.py TESTS_DIR OUTPUTS_JSON
TESTS_DIR is the `tests` directory of a trafilatura clone (its evaldata.json and
eval_common.py); OUTPUTS_JSON maps each extractor's name to {url: extracted text}. Each text is
scored by eval_common.count_item (whitespace-normalized substring matching of the annotated
"with" and "without" segments) and summed in eval_common.ConfusionMatrix, as evaluate.py does;
prints one tab-separated line per extractor: name, precision, recall, accuracy, F1, pages.
"""
import json
import sys

tests_dir, outputs_path = sys.argv[1], sys.argv[2]
sys.path.insert(0, tests_dir)
from eval_common import ConfusionMatrix, count_item, load_evaldata  # noqa: E402

evaldata = load_evaldata(tests_dir)
with open(outputs_path, encoding="utf-8") as f:
    outputs = json.load(f)
for name, texts in outputs.items():
    matrix = ConfusionMatrix()
    for url, item in evaldata.items():
        matrix.add(count_item(item, texts.get(url)))
    precision, recall, accuracy, f1 = matrix.scores()
    print(f"{name}\t{precision:.3f}\t{recall:.3f}\t{accuracy:.3f}\t{f1:.3f}\t{len(texts)}")
