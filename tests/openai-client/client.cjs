// Drives `rest serve` with the official `openai` npm client (see run.sh). Exits non-zero on the first mismatch.
const assert = require('node:assert/strict');
const mod = require(require.resolve('openai', { paths: [process.env.OPENAI_PREFIX] }));
const OpenAI = mod.OpenAI || mod.default || mod;

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

    console.log(`openai client OK: ${chunks} stream chunks, text ${JSON.stringify(text.slice(0, 40))}...`);
}

main().catch((e) => {
    console.error('FAIL:', e);
    process.exit(1);
});
