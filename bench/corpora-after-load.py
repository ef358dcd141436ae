#!/usr/bin/env python3
"""Issue 20's check that generated text never evicts a named corpus: a `rest serve` with --corpus-dir takes a corpus
holding the plain continuation of a prompt, then N generated requests (history on, at its default size), and a
request limited to that corpus must accept as many drafted tokens after them as before, its text equal to plain
decoding's. A benchmark script, not a test (it takes ~10 s on stories260K and needs ../shared/data).

Usage: bench/corpora-after-load.py REST MODEL PROMPTS.jsonl [N=1000]
Exit status 0 only when the corpus drafts as before and every text equals plain decoding's.
"""
import concurrent.futures as cf
import json
import shutil
import sys
import tempfile
import time
import urllib.request

import rest_serve  # bench/rest_serve.py

PROMPT = 'Once upon a time'


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    rest, model, prompts = sys.argv[1:4]
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
    work = tempfile.mkdtemp(prefix='corpora-after-load.')
    log = open(f'{work}/serve.log', 'w')
    srv, port = rest_serve.start([rest, 'serve', '-m', model, '--corpus-dir', f'{work}/corpora', '-t', '1', '--np',
                                  '4', '--draft-fixed', '8', '--port', '0'], log)

    def call(path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f'http://127.0.0.1:{port}{path}', data=data,
                                     headers={'Content-Type': 'application/json'})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())

    try:
        def complete(extra):
            body = {'prompt': PROMPT, 'max_tokens': 64, 'temperature': 0}
            body.update(extra)
            return call('/v1/completions', body)

        plain = complete({'speculate': False})['choices'][0]['text']
        call('/v1/corpora', {'name': 'alpha', 'text': PROMPT + plain})
        before = complete({'corpus': 'alpha'})
        texts = [json.loads(line)['prompt'] for line in open(prompts) if line.strip()]

        def generate(i):
            r = call('/v1/completions', {'prompt': texts[i % len(texts)], 'max_tokens': 32, 'temperature': 0})
            return r['usage']['completion_tokens']

        t0 = time.time()
        with cf.ThreadPoolExecutor(4) as ex:
            tokens = sum(ex.map(generate, range(n)))
        seconds = time.time() - t0
        after = complete({'corpus': 'alpha'})
        listed = {e['name']: e['n_documents'] for e in call('/v1/corpora')['data']}
    finally:
        srv.terminate()
        srv.wait(60)
    shutil.rmtree(work, ignore_errors=True)
    a0, a1 = before['rest']['n_accepted'], after['rest']['n_accepted']
    equal = before['choices'][0]['text'] == plain and after['choices'][0]['text'] == plain
    print(f'corpus alpha: {a0} drafted tokens accepted before {n} generated requests ({tokens} tokens in {seconds:.1f} s), '
          f'{a1} after; texts equal to plain: {equal}; corpora listed: {listed}')
    sys.exit(0 if a0 > 0 and a1 >= a0 and equal and listed.get('alpha') == 1 else 1)


if __name__ == '__main__':
    main()
