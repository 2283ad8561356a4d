// The Vercel AI SDK's default OpenAI provider, `openai(model)` (the Responses API), against a live front.
//
// Usage: node ai_sdk_client.mjs <scenario> ; environment: FRONT_BASE_URL (the front's /v1), TEXT_MODEL, TOOL_MODEL.
// Prints one JSON object with what the scenario observed; tests/integration/test_ai_sdk.py asserts on it.

import { createOpenAI } from "@ai-sdk/openai";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

const openai = createOpenAI({ baseURL: process.env.FRONT_BASE_URL, apiKey: "0000000000" });

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
  if (scenario === "tools" || scenario === "tools-stream") {
    const options = {
      model: openai(process.env.TOOL_MODEL),
      prompt: "What is the weather in Paris?",
      tools: { weather },
      stopWhen: stepCountIs(2),
    };
    const result = scenario === "tools" ? await generateText(options) : streamText(options);
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
  throw new Error(`unknown scenario ${scenario}`);
}

main(process.argv[2])
  .then((result) => {
    process.stdout.write(JSON.stringify(result));
  })
  .catch((error) => {
    process.stdout.write(JSON.stringify({ error: String(error), body: error?.responseBody ?? null }));
  });
