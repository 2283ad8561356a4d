// The Vercel AI SDK's default OpenAI provider, `openai(model)` (the Responses API), against a live front; the
// "compat-" scenarios use the `openai-compatible` provider (Chat Completions) instead.
//
// Usage: node ai_sdk_client.mjs <scenario> ; environment: FRONT_BASE_URL (the front's /v1), TEXT_MODEL, TOOL_MODEL.
// Prints one JSON object with what the scenario observed; tests/integration/test_ai_sdk.py asserts on it.

import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateObject, generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

// Every request body the provider sends, as it sends it (the conversation scenarios print them).
const sent = [];
async function recordingFetch(url, init) {
  if (init?.body && typeof init.body === "string") {
    sent.push({ url: String(url), body: JSON.parse(init.body) });
  }
  return fetch(url, init);
}

const openai = createOpenAI({
  baseURL: process.env.FRONT_BASE_URL,
  apiKey: process.env.FRONT_API_KEY ?? "0000000000",
  fetch: recordingFetch,
});

const compatible = createOpenAICompatible({
  name: "horde",
  baseURL: process.env.FRONT_BASE_URL,
  apiKey: process.env.FRONT_API_KEY ?? "0000000000",
  supportsStructuredOutputs: true,
  fetch: recordingFetch,
});

const city = z.object({ name: z.string(), population: z.number().int(), coastal: z.boolean() });

const weather = tool({
  description: "The weather in a city",
  inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }) => ({ city, forecast: "sunny", celsius: 21 }),
});

async function main(scenario) {
  if (scenario === "generate") {
    const result = await generateText({
      model: openai(process.env.TEXT_MODEL),
      prompt: "Tell me about lighthouses.",
      maxOutputTokens: 64,
    });
    return {
      text: result.text,
      finishReason: result.finishReason,
      usage: result.usage,
      responseId: result.response.id,
      modelId: result.response.modelId,
    };
  }
  if (scenario === "stream" || scenario === "chat-stream") {
    // "chat-stream": the chat completions model, openai.chat(model), instead of the default Responses one
    const model = scenario === "stream" ? openai(process.env.TEXT_MODEL) : openai.chat(process.env.TEXT_MODEL);
    const result = streamText({ model, prompt: "Tell me about lighthouses." });
    const parts = [];
    for await (const part of result.fullStream) {
      parts.push(part.type);
      if (part.type === "error") {
        return { error: String(part.error) };
      }
    }
    return {
      text: await result.text,
      finishReason: await result.finishReason,
      usage: await result.usage,
      deltas: parts.filter((type) => type === "text-delta").length,
      parts,
    };
  }
  if (scenario === "object" || scenario === "compat-object") {
    // generateObject with a zod schema: response_format json_schema (text.format on the Responses API)
    const model =
      scenario === "object" ? openai(process.env.TOOL_MODEL) : compatible.chatModel(process.env.TOOL_MODEL);
    const result = await generateObject({
      model,
      schema: city,
      prompt: "Describe the city of Lisbon.",
      maxOutputTokens: 200,
    });
    return { object: result.object, finishReason: result.finishReason, bodies: sent.map((entry) => entry.body) };
  }
  if (scenario === "tools" || scenario === "tools-stream" || scenario === "compat-tools") {
    const options = {
      model:
        scenario === "compat-tools"
          ? compatible.chatModel(process.env.TOOL_MODEL)
          : openai(process.env.TOOL_MODEL),
      prompt: "What is the weather in Paris?",
      tools: { weather },
      stopWhen: stepCountIs(2),
    };
    const result = scenario === "tools-stream" ? streamText(options) : await generateText(options);
    const steps = await result.steps;
    return {
      text: await result.text,
      finishReason: await result.finishReason,
      steps: steps.map((step) => ({
        finishReason: step.finishReason,
        toolCalls: step.toolCalls.map((call) => ({ toolName: call.toolName, input: call.input })),
        toolResults: step.toolResults.map((result) => ({ toolName: result.toolName, output: result.output })),
        text: step.text,
      })),
    };
  }
  if (scenario === "conversation" || scenario === "conversation-stream") {
    // Two turns as the AI SDK documents a chat: the second sends the first turn's response.messages back, which the
    // default provider (store: true by default at OpenAI) writes as item_reference items to the stored output.
    const model = openai(process.env.CONVERSATION_MODEL ?? process.env.TEXT_MODEL);
    const messages = [{ role: "user", content: "Tell me about lighthouses." }];
    const turns = [];
    for (const question of [null, "And who keeps them?"]) {
      if (question !== null) {
        messages.push({ role: "user", content: question });
      }
      const options = { model, messages, maxOutputTokens: 256 };
      const result = scenario === "conversation" ? await generateText(options) : streamText(options);
      const response = await result.response;
      turns.push({
        text: await result.text,
        reasoningText: (await result.reasoningText) ?? null,
        finishReason: await result.finishReason,
        responseId: response.id,
      });
      messages.push(...response.messages);
    }
    return { turns, bodies: sent.map((entry) => entry.body), urls: sent.map((entry) => entry.url) };
  }
  throw new Error(`unknown scenario ${scenario}`);
}

main(process.argv[2])
  .then((result) => {
    process.stdout.write(JSON.stringify(result));
  })
  .catch((error) => {
    process.stdout.write(JSON.stringify({ error: String(error), body: error?.responseBody ?? null }));
  });
