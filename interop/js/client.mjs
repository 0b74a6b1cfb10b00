// Drives a running `channels serve --executor conformance` with the @a2a-js/sdk 1.3.0 client
// (A2A v1.0) over both bindings, HTTP+JSON and JSON-RPC.
//
//   node client.mjs URL TOKEN [OTHER_TOKEN]
//
// URL is the server's base URL (the agent card is resolved from it), TOKEN a bearer token of one
// principal and OTHER_TOKEN, if given, one of another principal (for the isolation check).
// Prints one JSON line per check: {"binding","check","ok","detail"|"error"}; exits 1 if any
// check failed, 2 on a usage error. interop/js_test.go runs it and reads those lines.
import { randomBytes } from 'node:crypto';

import { Role, TaskState } from '@a2a-js/sdk';
import { ClientFactory, JsonRpcTransportFactory, RestTransportFactory } from '@a2a-js/sdk/client';
import { TaskNotCancelableError, TaskNotFoundError } from '@a2a-js/sdk/errors';

const [url, token, otherToken] = process.argv.slice(2);
if (!url || !token) {
  console.error('usage: node client.mjs URL TOKEN [OTHER_TOKEN]');
  process.exit(2);
}

// authFetch sends every request with the bearer token.
function authFetch(tok) {
  return (input, init = {}) => {
    const headers = new Headers(init.headers);
    headers.set('Authorization', `Bearer ${tok}`);
    return fetch(input, { ...init, headers });
  };
}

// newClient resolves the agent card at url and builds a client of the one binding asked for
// (only that transport factory is registered, so the card's other interface cannot be chosen).
async function newClient(binding, tok) {
  const fetchImpl = authFetch(tok);
  const transport = binding === 'JSONRPC'
    ? new JsonRpcTransportFactory({ fetchImpl })
    : new RestTransportFactory({ fetchImpl });
  const factory = new ClientFactory({ transports: [transport] });
  return factory.createFromUrl(url);
}

// message is a user message whose messageId selects the conformance agent's scenario.
function message(prefix, binding, extra = {}) {
  return {
    messageId: `${prefix}-${randomBytes(4).toString('hex')}-js-${binding.toLowerCase().replace('+', '')}`,
    role: Role.ROLE_USER,
    parts: [{ content: { $case: 'text', value: `js ${prefix}` } }],
    ...extra,
  };
}

const stateName = (s) => TaskState[s] ?? String(s);
const textOf = (m) => m?.parts?.[0]?.content?.$case === 'text' ? m.parts[0].content.value : undefined;
const isTask = (r) => r && typeof r.id === 'string' && r.status !== undefined;
const isMessage = (r) => r && typeof r.messageId === 'string' && !isTask(r);

function expect(cond, what) {
  if (!cond) throw new Error(what);
}

// kinds names the events of a stream: task, message, status:<STATE>, artifact.
function kinds(events) {
  return events.map((ev) => {
    const p = ev.payload;
    switch (p?.$case) {
      case 'statusUpdate': return `status:${stateName(p.value.status.state)}`;
      case 'artifactUpdate': return 'artifact';
      default: return p?.$case ?? '?';
    }
  });
}

async function collect(gen) {
  const out = [];
  for await (const ev of gen) out.push(ev);
  return out;
}

let failed = 0;
async function check(binding, name, fn) {
  try {
    const detail = await fn();
    console.log(JSON.stringify({ binding, check: name, ok: true, detail: detail ?? '' }));
  } catch (err) {
    failed++;
    console.log(JSON.stringify({ binding, check: name, ok: false, error: `${err?.name ?? 'Error'}: ${err?.message ?? err}` }));
  }
}

async function suite(binding) {
  let client;
  await check(binding, 'card', async () => {
    client = await newClient(binding, token);
    const card = await client.getAgentCard(); // the extended card: the public one declares it
    expect(card.supportedInterfaces?.length === 2, `supportedInterfaces ${JSON.stringify(card.supportedInterfaces)}`);
    expect(card.capabilities?.streaming === true, 'capabilities.streaming is not true');
    return `${card.name} ${card.version}, ${client.transport.protocolName} ${client.protocolVersion}`;
  });
  if (!client) return;

  let completed;
  await check(binding, 'send-blocking', async () => {
    const r = await client.sendMessage({ message: message('tck-complete-task', binding) });
    expect(isTask(r), `result ${JSON.stringify(r)} is not a Task`);
    expect(r.status.state === TaskState.TASK_STATE_COMPLETED, `state ${stateName(r.status.state)}`);
    expect(textOf(r.status.message) === 'Hello from TCK', `status text ${textOf(r.status.message)}`);
    completed = r;
    return r.id;
  });

  await check(binding, 'send-direct-message', async () => {
    const r = await client.sendMessage({ message: message('tck-message-response', binding) });
    expect(isMessage(r), `result ${JSON.stringify(r)} is not a Message`);
    expect(r.role === Role.ROLE_AGENT && textOf(r) === 'Direct message response', `message ${JSON.stringify(r)}`);
  });

  await check(binding, 'send-return-immediately', async () => {
    const r = await client.sendMessage({
      message: message('test-resubscribe-message-id', binding),
      configuration: { returnImmediately: true },
    });
    expect(isTask(r), 'not a Task');
    expect([TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING].includes(r.status.state), `state ${stateName(r.status.state)}`);
    return stateName(r.status.state);
  });

  await check(binding, 'get', async () => {
    expect(completed, 'no task from send-blocking');
    const t = await client.getTask({ id: completed.id, historyLength: 0 });
    expect(t.id === completed.id && t.status.state === TaskState.TASK_STATE_COMPLETED, `task ${t.id} ${stateName(t.status.state)}`);
    expect(!t.history || t.history.length === 0, `historyLength 0 returned ${t.history?.length} messages`);
    const full = await client.getTask({ id: completed.id });
    expect(full.history?.length >= 2, `full task has ${full.history?.length} history messages`);
  });

  await check(binding, 'list', async () => {
    expect(completed, 'no task from send-blocking');
    await client.sendMessage({ message: message('tck-artifact-text', binding, { contextId: completed.contextId }) });
    const p1 = await client.listTasks({ contextId: completed.contextId, pageSize: 1 });
    expect(p1.totalSize === 2 && p1.tasks.length === 1 && p1.pageSize === 1 && p1.nextPageToken, `page 1 ${JSON.stringify({ ...p1, tasks: p1.tasks.length })}`);
    const p2 = await client.listTasks({ contextId: completed.contextId, pageSize: 1, pageToken: p1.nextPageToken });
    expect(p2.tasks.length === 1 && p2.nextPageToken === '' && p2.tasks[0].id === completed.id, `page 2 ${JSON.stringify({ ...p2, tasks: p2.tasks.map((t) => t.id) })}`);
    return `totalSize ${p1.totalSize}`;
  });

  await check(binding, 'stream', async () => {
    const evs = await collect(client.sendMessageStream({ message: message('tck-stream-001', binding) }));
    const got = kinds(evs).join(' ');
    expect(got === 'task status:TASK_STATE_WORKING artifact status:TASK_STATE_COMPLETED', `events ${got}`);
    const art = evs[2].payload.value.artifact;
    expect(textOf(art) === 'Stream hello from TCK', `artifact ${JSON.stringify(art)}`);
    return got;
  });

  await check(binding, 'subscribe', async () => {
    const t = await client.sendMessage({
      message: message('test-resubscribe-message-id', binding),
      configuration: { returnImmediately: true },
    });
    const evs = await collect(client.resubscribeTask({ id: t.id }));
    const got = kinds(evs);
    expect(got[0] === 'task' && got.at(-1) === 'status:TASK_STATE_COMPLETED', `events ${got.join(' ')}`);
    return got.join(' ');
  });

  await check(binding, 'cancel', async () => {
    const t = await client.sendMessage({ message: message('tck-input-required', binding) });
    expect(t.status.state === TaskState.TASK_STATE_INPUT_REQUIRED, `state ${stateName(t.status.state)}`);
    const c = await client.cancelTask({ id: t.id });
    expect(c.status.state === TaskState.TASK_STATE_CANCELED, `cancel returned ${stateName(c.status.state)}`);
    // Cancel is idempotent: a second cancel returns the canceled task.
    const again = await client.cancelTask({ id: t.id });
    expect(again.status.state === TaskState.TASK_STATE_CANCELED, `second cancel returned ${stateName(again.status.state)}`);
    const done = await client.sendMessage({ message: message('tck-complete-task', binding) });
    try {
      await client.cancelTask({ id: done.id });
    } catch (err) {
      expect(err instanceof TaskNotCancelableError, `cancel of a completed task threw ${err?.name}: ${err?.message}`);
      return err.name;
    }
    throw new Error('the cancel of a completed task succeeded');
  });

  await check(binding, 'not-found', async () => {
    try {
      await client.getTask({ id: 'no-such-task' });
    } catch (err) {
      expect(err instanceof TaskNotFoundError, `threw ${err?.name}: ${err?.message}`);
      return `${err.name} ${err.reason}`;
    }
    throw new Error('GetTask of an unknown task succeeded');
  });

  if (otherToken) {
    await check(binding, 'principals-isolated', async () => {
      expect(completed, 'no task from send-blocking');
      const other = await newClient(binding, otherToken);
      try {
        await other.getTask({ id: completed.id });
      } catch (err) {
        expect(err instanceof TaskNotFoundError, `threw ${err?.name}: ${err?.message}`);
        const list = await other.listTasks({ contextId: completed.contextId });
        expect(list.totalSize === 0, `the other principal lists ${list.totalSize} tasks`);
        return err.name;
      }
      throw new Error("another principal read the task");
    });
  }
}

for (const binding of ['HTTP+JSON', 'JSONRPC']) {
  await suite(binding);
}
process.exit(failed > 0 ? 1 : 0);
