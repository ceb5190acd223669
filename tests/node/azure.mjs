// The official Node AzureOpenAI client, unchanged, against an oncegate as
// its Azure OpenAI endpoint: chat (whole and streamed) and embeddings on
// /openai/deployments/{deployment}/…?api-version=… with the api-key
// header. It prints one JSON line of what it saw; tests/e2e
// (TestNodeAzureOpenAI) checks it. Usage:
//   ONCEGATE_ENDPOINT=http://127.0.0.1:8080 ONCEGATE_KEY=sk-… node azure.mjs DEPLOYMENT
import { AzureOpenAI } from "openai";

const deployment = process.argv[2] ?? "chat";
const client = new AzureOpenAI({ endpoint: process.env.ONCEGATE_ENDPOINT, apiKey: process.env.ONCEGATE_KEY,
  apiVersion: "2024-10-21", deployment });
const out = { ids: [] };

const { data: chat, response: r1 } = await client.chat.completions
  .create({ model: "", messages: [{ role: "user", content: "hello from azure" }] }).withResponse();
out.text = chat.choices[0].message.content;
out.ids.push(r1.headers.get("x-oncegate-request-id"));

const { data: stream, response: r2 } = await client.chat.completions
  .create({ model: "", stream: true, messages: [{ role: "user", content: "stream from azure" }] }).withResponse();
out.streamed = "";
for await (const chunk of stream) out.streamed += chunk.choices[0]?.delta?.content ?? "";
out.ids.push(r2.headers.get("x-oncegate-request-id"));

const { data: emb, response: r3 } = await client.embeddings
  .create({ model: "", input: "vector me" }).withResponse();
out.dimensions = emb.data[0].embedding.length;
out.ids.push(r3.headers.get("x-oncegate-request-id"));

console.log(JSON.stringify(out));
