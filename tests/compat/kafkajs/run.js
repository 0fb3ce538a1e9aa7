'use strict'
// Runs KafkaJS against a broker for tests/compat/test_kafkajs.py, which keeps every assertion: this script only
// does what it is told and reports what happened.
//
// stdin: one JSON object
//   {"brokers": ["127.0.0.1:9092"], "retry": {...KafkaJS retry options}, "steps": [step, ...]}
// a step is one of
//   {"do": "send", "producer": {...producer options}, "send": {...producer.send() argument}}
//   {"do": "sendBatch", "producer": {...}, "batch": {...producer.sendBatch() argument}}
//   {"do": "transaction", "producer": {...}, "send": {...}}   begin a transaction, send, commit
//       ("abort": true: abort it instead, once sent)
//   {"do": "admin", "method": "createTopics", "args": [...]}  any admin client method, called with args
//   {"do": "consume", "consumer": {...}, "topic": "t", "fromBeginning": true, "timeoutMs": 20000}
//       runs a consumer until its first message, its first crash or the timeout, whichever comes first
// In send/batch arguments, "compression": "gzip" (any case) names a KafkaJS CompressionTypes member.
//
// stdout: one JSON object {"results": [one per step]}, each {"ok": true, "value": ...} or {"ok": false,
// "error": {...}}; an error keeps KafkaJS's name, Kafka error type and code, message, and its causes.
// Log lines from KafkaJS go to stderr (the test prints them when it fails), and the ones a consume step saw are
// also in its result, because what a user reads there is part of what the tests check.

const { Kafka, CompressionTypes, logLevel } = require('kafkajs')

const logs = []

function logCreator () {
  return ({ namespace, label, log }) => {
    const line = { level: label, namespace, message: log.message }
    if (log.error) line.error = String(log.error)
    logs.push(line)
    process.stderr.write(JSON.stringify(line) + '\n')
  }
}

function describeError (e, depth = 0) {
  if (e === undefined || e === null || depth > 5) return null
  const out = { name: e.name, message: e.message }
  for (const key of ['type', 'code', 'retriable', 'topic', 'retryCount']) {
    if (e[key] !== undefined) out[key] = e[key]
  }
  if (e.cause && e.cause !== e) out.cause = describeError(e.cause, depth + 1)
  if (e.originalError && e.originalError !== e.cause) out.originalError = describeError(e.originalError, depth + 1)
  if (Array.isArray(e.errors)) out.errors = e.errors.map(x => describeError(x, depth + 1))
  return out
}

// Buffers (keys, values, header values) come back as their UTF-8 text.
function plain (_key, value) {
  if (value && value.type === 'Buffer' && Array.isArray(value.data)) return Buffer.from(value.data).toString()
  return value
}

function withCompression (arg) {
  const copy = Object.assign({}, arg)
  if (typeof copy.compression === 'string') {
    const name = copy.compression.toUpperCase()
    if (!(name in CompressionTypes)) throw new Error(`unknown compression ${copy.compression}`)
    copy.compression = CompressionTypes[name]
  }
  return copy
}

async function withProducer (kafka, options, work) {
  const producer = kafka.producer(options || {})
  await producer.connect()
  try {
    return await work(producer)
  } finally {
    await producer.disconnect()
  }
}

async function consume (kafka, step) {
  const consumer = kafka.consumer(step.consumer)
  const seen = { messages: [], crash: null }
  const firstLog = logs.length
  let finish
  const done = new Promise(resolve => { finish = resolve })
  consumer.on(consumer.events.CRASH, event => {
    seen.crash = { error: describeError(event.payload.error), restart: event.payload.restart }
    finish()
  })
  const timer = setTimeout(finish, step.timeoutMs || 20000)
  try {
    await consumer.connect()
    await consumer.subscribe({ topics: [step.topic], fromBeginning: step.fromBeginning !== false })
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        seen.messages.push({ partition, offset: message.offset, value: message.value })
        finish()
      }
    })
    await done
  } finally {
    clearTimeout(timer)
    await consumer.disconnect()
  }
  seen.logs = logs.slice(firstLog)
  return seen
}

async function runStep (kafka, admin, step) {
  switch (step.do) {
    case 'send':
      return withProducer(kafka, step.producer, p => p.send(withCompression(step.send)))
    case 'sendBatch':
      return withProducer(kafka, step.producer, p => p.sendBatch(withCompression(step.batch)))
    case 'transaction':
      return withProducer(kafka, step.producer, async p => {
        const txn = await p.transaction()
        try {
          const sent = await txn.send(withCompression(step.send))
          if (step.abort) await txn.abort()
          else await txn.commit()
          return sent
        } catch (e) {
          await txn.abort().catch(() => {})
          throw e
        }
      })
    case 'admin':
      if (typeof admin[step.method] !== 'function') throw new Error(`no admin method ${step.method}`)
      return admin[step.method](...(step.args || []))
    case 'consume':
      return consume(kafka, step)
    default:
      throw new Error(`unknown step ${JSON.stringify(step.do)}`)
  }
}

async function main () {
  const chunks = []
  for await (const chunk of process.stdin) chunks.push(chunk)
  const plan = JSON.parse(Buffer.concat(chunks).toString())
  const kafka = new Kafka({
    clientId: plan.clientId || 'kjbod-kafkajs',
    brokers: plan.brokers,
    retry: plan.retry,
    requestTimeout: plan.requestTimeout,
    logLevel: logLevel[plan.logLevel || 'WARN'],
    logCreator
  })
  const admin = kafka.admin()
  await admin.connect()
  const results = []
  try {
    for (const step of plan.steps) {
      try {
        const value = await runStep(kafka, admin, step)
        results.push({ ok: true, value: value === undefined ? null : value })
      } catch (e) {
        results.push({ ok: false, error: describeError(e) })
      }
    }
  } finally {
    await admin.disconnect()
  }
  process.stdout.write(JSON.stringify({ results }, plain) + '\n')
}

main().catch(e => {
  process.stderr.write(`run.js: ${e && e.stack ? e.stack : e}\n`)
  process.exit(1)
})
