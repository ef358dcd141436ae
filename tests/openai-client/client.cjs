// Drives `rest serve` with the official `openai` npm client (see run.sh). Exits non-zero on the first mismatch.
const assert = require('node:assert/strict');
const mod = require(require.resolve('openai', { paths: [process.env.OPENAI_PREFIX] }));
const OpenAI = mod.OpenAI || mod.default || mod;
const { execFile } = require('node:child_process');
const { promisify } = require('node:util');
const fs = require('node:fs');
const path = require('node:path');

// What `rest generate --json` reports for a completion with this prediction, with the server's settings.
// Asynchronous: a blocking child (execFileSync) stalls the event loop, so the client's idle keep-alive socket
// outlives the server's 5 s keep-alive and the next request fails with "other side closed" (a slow run, ASan).
async function generateCounters(prompt, maxTokens, prediction) {
    const file = path.join(process.env.REST_TMP, 'openai-client-prediction.txt');
    fs.writeFileSync(file, prediction);
    const { stdout: out } = await promisify(execFile)(process.env.REST_CLI, [
        'generate', '-m', process.env.REST_MODEL, '-p', prompt, '-n', String(maxTokens), '--temp', '0', '-t', '1',
        '--draft-fixed', '4', '--prediction-file', file, '--json', '--no-warm-start'], { encoding: 'utf8' });
    const j = JSON.parse(out.trim().split('\n').pop());
    return { text: j.text, accepted: j.accepted_prediction_tokens, rejected: j.rejected_prediction_tokens };
}

// Predicted outputs (OpenAI's `prediction`): chat and completions, streamed and not, against `rest generate`.
async function predictedOutputs(client, model) {
    const prompt = 'The sea is';
    const base = await client.completions.create({ model, prompt, max_tokens: 48, temperature: 0 });
    const predicted = base.choices[0].text;
    const prediction = { type: 'content', content: predicted };
    const c = await client.completions.create({ model, prompt, max_tokens: 48, temperature: 0, prediction });
    assert.equal(c.choices[0].text, predicted, 'a prediction must not change the output');
    const d = c.usage.completion_tokens_details;
    assert.ok(d.accepted_prediction_tokens > 0, JSON.stringify(c.usage));
    const g = await generateCounters(prompt, 48, predicted);
    assert.equal(g.text, predicted);
    assert.equal(d.accepted_prediction_tokens, g.accepted, 'accepted_prediction_tokens differs from rest generate');
    assert.equal(d.rejected_prediction_tokens, g.rejected, 'rejected_prediction_tokens differs from rest generate');

    let streamed = '';
    let usage = null;
    for await (const chunk of await client.completions.create({
        model, prompt, max_tokens: 48, temperature: 0, prediction, stream: true, stream_options: { include_usage: true },
    })) {
        if (chunk.usage) usage = chunk.usage;
        streamed += chunk.choices[0]?.text ?? '';
    }
    assert.equal(streamed, predicted);
    assert.deepEqual(usage.completion_tokens_details, d);

    // Chat, the prediction as an array of text parts (split anywhere: the parts are joined).
    const messages = [{ role: 'user', content: 'Say something.' }];
    const plainChat = await client.chat.completions.create({ model, messages, max_tokens: 32, temperature: 0 });
    const answer = plainChat.choices[0].message.content;
    const half = Math.floor(answer.length / 2);
    const parts = { type: 'content', content: [{ type: 'text', text: answer.slice(0, half) }, { type: 'text', text: answer.slice(half) }] };
    const chat = await client.chat.completions.create({ model, messages, max_tokens: 32, temperature: 0, prediction: parts });
    assert.equal(chat.choices[0].message.content, answer);
    const cd = chat.usage.completion_tokens_details;
    assert.ok(cd.accepted_prediction_tokens > 0, JSON.stringify(chat.usage));
    // The same request through `rest generate`: the prompt the chat renders to (special tokens parsed, BOS added,
    // as the server tokenizes it) and the joined parts as the prediction file.
    const rendered = await post('/apply-template', { messages });
    assert.equal(rendered.status, 200, JSON.stringify(rendered.json));
    const gc = await generateCounters(rendered.json.prompt, 32, answer);
    assert.equal(gc.text.trimStart(), answer.trimStart());  // whole-output detokenization drops the first token's leading space
    assert.equal(cd.accepted_prediction_tokens, gc.accepted, 'chat accepted_prediction_tokens differs from rest generate');
    assert.equal(cd.rejected_prediction_tokens, gc.rejected, 'chat rejected_prediction_tokens differs from rest generate');
    let chatText = '';
    let chatUsage = null;
    for await (const chunk of await client.chat.completions.create({
        model, messages, max_tokens: 32, temperature: 0, prediction: parts, stream: true, stream_options: { include_usage: true },
    })) {
        if (chunk.usage) chatUsage = chunk.usage;
        chatText += chunk.choices[0]?.delta?.content ?? '';
    }
    assert.equal(chatText, answer);
    assert.deepEqual(chatUsage.completion_tokens_details, cd);

    // Malformed predictions are 400s naming the field.
    await assert.rejects(client.chat.completions.create({ model, messages, prediction: { type: 'text', content: 'x' } }),
                         (e) => e.status === 400 && /prediction\.type/.test(e.message));
    await assert.rejects(client.chat.completions.create({ model, messages, prediction: { type: 'content', content: [{ type: 'image_url' }] } }),
                         (e) => e.status === 400 && /prediction\.content/.test(e.message));
    // One longer than a slot's context only drafts: cut to it, as OpenAI takes any, and the output is unchanged.
    const long = { model, prompt, max_tokens: 8, temperature: 0 };
    const huge = { type: 'content', content: 'x '.repeat(5000) };
    const cut = await client.completions.create({ ...long, prediction: huge });
    assert.equal(cut.choices[0].text, (await client.completions.create(long)).choices[0].text);
    return `prediction: ${d.accepted_prediction_tokens} accepted, ${d.rejected_prediction_tokens} rejected; chat ${cd.accepted_prediction_tokens} / ${cd.rejected_prediction_tokens} (= rest generate)`;
}

// Streamed log probabilities as the SDK hands them out: each chunk's choice.logprobs joined equals the response's
// (the two runs verify different drafts, so values agree to batched rounding).
async function streamedLogprobs(client, model) {
    const messages = [{ role: 'user', content: 'Tell me about the sea.' }];
    const args = { model, messages, max_tokens: 24, temperature: 0, logprobs: true, top_logprobs: 2 };
    const whole = await client.chat.completions.create(args);
    const want = whole.choices[0].logprobs.content;
    const got = [];
    let text = '';
    for await (const chunk of await client.chat.completions.create({ ...args, stream: true })) {
        const c = chunk.choices[0];
        if (!c) continue;
        text += c.delta?.content ?? '';
        got.push(...(c.logprobs?.content ?? []));
    }
    assert.equal(text, whole.choices[0].message.content);
    assert.deepEqual(got.map((e) => e.token), want.map((e) => e.token));
    got.forEach((e, i) => {
        assert.ok(Math.abs(e.logprob - want[i].logprob) < 1e-3, `token ${i}: ${e.logprob} vs ${want[i].logprob}`);
        assert.deepEqual(e.top_logprobs.map((t) => t.token), want[i].top_logprobs.map((t) => t.token));
    });

    const completion = { model, prompt: 'The sea is', max_tokens: 16, temperature: 0, logprobs: 2 };
    const w = (await client.completions.create(completion)).choices[0].logprobs;
    const tokens = [];
    const offsets = [];
    for await (const chunk of await client.completions.create({ ...completion, stream: true })) {
        const lp = chunk.choices[0]?.logprobs;
        if (!lp) continue;
        tokens.push(...lp.tokens);
        offsets.push(...lp.text_offset);
    }
    assert.deepEqual(tokens, w.tokens);
    assert.deepEqual(offsets, w.text_offset);
    return `streamed logprobs: ${got.length} + ${tokens.length} tokens`;
}

// REST_MODE: phi3 (the fixture's own Jinja template; every check) or chatml (stories260K, by name or as the fallback).
const mode = process.env.REST_MODE || 'phi3';

// The prompts llama-server renders for the conversation below (test-server-chat.cpp checks these renderings
// against llama.cpp's `common` itself).
const expectedPrompt = {
    chatml: '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n' +
            'Write one sentence about the sea.<|im_end|>\n<|im_start|>assistant\n',
    // phi-3's template has no system role: llama.cpp's common folds the system text into the first user turn.
    phi3: '<|user|>\nYou are a helpful assistant.\nWrite one sentence about the sea.<|end|>\n<|assistant|>\n',
};

// llama-server's own endpoints (not part of the OpenAI API, so plain fetch).
async function post(route, body) {
    const r = await fetch(process.env.REST_URL + route, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${process.env.REST_KEY}` },
        body: JSON.stringify(body),
    });
    return { status: r.status, json: await r.json() };
}

// /apply-template shows the prompt the chat generated from; tokenized with BOS it has usage.prompt_tokens tokens.
async function renderedPrompt(messages, usage) {
    const t = await post('/apply-template', { messages });
    assert.equal(t.status, 200, JSON.stringify(t.json));
    assert.equal(t.json.prompt, expectedPrompt[mode]);
    const tok = await post('/tokenize', { content: t.json.prompt, add_special: true });
    assert.equal(tok.status, 200, JSON.stringify(tok.json));
    assert.equal(tok.json.tokens.length, usage.prompt_tokens, 'the chat prompt is not the rendered template');
    const de = await post('/detokenize', { tokens: tok.json.tokens });
    assert.equal(de.status, 200, JSON.stringify(de.json));
    assert.ok(de.json.content.includes('Write one sentence about the sea.'), de.json.content);
    const bad = await post('/tokenize', { content: 5 });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.param, 'content');
    return JSON.stringify(t.json.prompt.slice(0, 30));
}

async function main() {
    const client = new OpenAI({ baseURL: process.env.REST_URL + '/v1', apiKey: process.env.REST_KEY, maxRetries: 0 });
    const messages = [
        { role: 'system', content: 'You are a helpful assistant.' },
        { role: 'user', content: 'Write one sentence about the sea.' },
    ];

    const models = await client.models.list();
    assert.equal(models.data.length, 1);
    const model = models.data[0].id;

    // Non-streaming chat.
    const r = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0 });
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.equal(typeof r.choices[0].message.content, 'string');
    assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
    assert.ok(r.usage.prompt_tokens > 0 && r.usage.completion_tokens > 0);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);

    // Streaming chat: the deltas join to the same greedy text.
    const stream = await client.chat.completions.create({
        model, messages, max_tokens: 24, temperature: 0, stream: true, stream_options: { include_usage: true },
    });
    let text = '';
    let chunks = 0;
    let usage = null;
    let finish = null;
    for await (const chunk of stream) {
        chunks++;
        if (chunk.usage) usage = chunk.usage;
        const c = chunk.choices[0];
        if (!c) continue;
        text += c.delta?.content ?? '';
        if (c.finish_reason) finish = c.finish_reason;
    }
    assert.ok(chunks >= 3, `only ${chunks} chunks`);
    assert.equal(text, r.choices[0].message.content);
    assert.equal(finish, r.choices[0].finish_reason);
    assert.equal(usage.completion_tokens, r.usage.completion_tokens);
    const prompt = await renderedPrompt(messages, r.usage);

    // Legacy completions.
    const c = await client.completions.create({ model, prompt: 'The sea is', max_tokens: 8, temperature: 0 });
    assert.equal(c.object, 'text_completion');
    assert.equal(typeof c.choices[0].text, 'string');
    assert.equal(c.usage.completion_tokens, 8);

    // A wrong key is an AuthenticationError (401); bad input a BadRequestError (400).
    const wrong = new OpenAI({ baseURL: process.env.REST_URL + '/v1', apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(wrong.models.list(), (e) => e.status === 401);
    await assert.rejects(client.chat.completions.create({ model, messages, n: 2 }),
                         (e) => e.status === 400 && /'n'/.test(e.message));

    const pred = mode === 'phi3' ? await predictedOutputs(client, model) : 'no prediction checks on stories260K';
    const lps = mode === 'phi3' ? await streamedLogprobs(client, model) : 'no logprob checks on stories260K';
    console.log(`openai client OK (${mode}): prompt ${prompt}..., ${chunks} stream chunks, ` +
                `text ${JSON.stringify(text.slice(0, 40))}..., ${pred}, ${lps}`);
}

main().catch((e) => {
    console.error('FAIL:', e);
    process.exit(1);
});
