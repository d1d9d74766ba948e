// kafkajs 2.2.4 consumer groups against a real moldau server: two members of one group split a
// six-partition topic and consume every record exactly once (consumer.run), commit, then admin
// listGroups / describeGroups / fetchOffsets / resetOffsets / setOffsets / deleteGroups, and a new
// member resuming from the reset offsets.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import kafkajs from 'kafkajs'
import { Moldau } from './broker.mjs'

const { Kafka, logLevel } = kafkajs

let broker
let kafka
let admin
let seq = 0
const uniq = base => `kafkajs-${base}-${process.pid}-${++seq}`

async function waitFor (pred, what, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs
  let last
  while (Date.now() < deadline) {
    last = await pred()
    if (last) return last
    await new Promise(resolve => setTimeout(resolve, 50))
  }
  throw new Error(`timed out waiting for ${what} (last: ${JSON.stringify(last)})`)
}

before(async () => {
  broker = await new Moldau({ 'group.initial.rebalance.delay.ms': 0, 'group.min.session.timeout.ms': 1000 }).start()
  kafka = new Kafka({
    clientId: 'moldau-groups',
    brokers: [broker.bootstrap],
    logLevel: logLevel.NOTHING,
    connectionTimeout: 5000,
    requestTimeout: 10000,
    retry: { retries: 5, initialRetryTime: 100 }
  })
  admin = kafka.admin()
  await admin.connect()
})

after(async () => {
  try { if (admin) await admin.disconnect() } finally { if (broker) await broker.stop() }
})

// A group member that records its assignment (GROUP_JOIN events) and the messages it receives.
async function startMember (groupId, topic, name, opts = {}) {
  const consumer = kafka.consumer({
    groupId, sessionTimeout: 6000, heartbeatInterval: 300, rebalanceTimeout: 10000, maxWaitTimeInMs: 100, ...opts
  })
  const member = { consumer, name, assigned: [], messages: [], joins: 0, crashes: [] }
  consumer.on(consumer.events.GROUP_JOIN, e => {
    member.joins++
    member.assigned = (e.payload.memberAssignment[topic] || []).slice().sort((a, b) => a - b)
  })
  consumer.on(consumer.events.CRASH, e => member.crashes.push(String(e.payload.error)))
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  await consumer.run({
    autoCommit: true,
    autoCommitInterval: 100,
    eachMessage: async ({ partition, message }) => {
      member.messages.push({ partition, offset: Number(message.offset), value: message.value.toString() })
    }
  })
  return member
}

async function produceSpread (topic, partitions, perPartition) {
  const producer = kafka.producer()
  await producer.connect()
  const values = []
  try {
    for (let p = 0; p < partitions; p++) {
      const messages = []
      for (let i = 0; i < perPartition; i++) {
        const value = `v-${p}-${i}`
        values.push(value)
        messages.push({ value, partition: p })
      }
      await producer.send({ topic, messages })
    }
  } finally {
    await producer.disconnect()
  }
  return values
}

test('two kafkajs members share a 6-partition topic, commit, and admin sees the group', async () => {
  const topic = uniq('grp')
  const groupId = uniq('group')
  assert.equal(await admin.createTopics({ topics: [{ topic, numPartitions: 6, replicationFactor: 1 }] }), true)
  const a = await startMember(groupId, topic, 'a')
  const b = await startMember(groupId, topic, 'b')
  try {
    await waitFor(() => a.assigned.length === 3 && b.assigned.length === 3 &&
      new Set([...a.assigned, ...b.assigned]).size === 6, 'a 3+3 assignment')
    const values = await produceSpread(topic, 6, 20)
    await waitFor(() => a.messages.length + b.messages.length >= values.length, 'all records consumed')
    const got = [...a.messages, ...b.messages].map(m => m.value).sort()
    assert.deepEqual(got, values.slice().sort(), 'every record exactly once')
    for (const m of [a, b]) {
      for (const msg of m.messages) assert.ok(m.assigned.includes(msg.partition), `${m.name} read partition ${msg.partition}`)
    }

    // listGroups / describeGroups while Stable
    const { groups } = await admin.listGroups()
    assert.ok(groups.some(g => g.groupId === groupId && g.protocolType === 'consumer'), JSON.stringify(groups))
    const desc = await admin.describeGroups([groupId])
    assert.equal(desc.groups.length, 1)
    const g = desc.groups[0]
    assert.equal(g.errorCode, 0)
    assert.equal(g.state, 'Stable')
    assert.equal(g.protocolType, 'consumer')
    assert.equal(g.protocol, 'RoundRobinAssigner')
    assert.equal(g.members.length, 2)
    for (const m of g.members) {
      assert.equal(m.clientId, 'moldau-groups')
      const assignment = kafkajs.AssignerProtocol.MemberAssignment.decode(m.memberAssignment)
      assert.equal(assignment.assignment[topic].length, 3)
    }

    // committed offsets (auto-commit): every partition at 20
    await waitFor(async () => {
      const offsets = await admin.fetchOffsets({ groupId, topics: [topic] })
      return offsets[0].partitions.every(p => p.offset === '20')
    }, 'committed offsets at 20')

    // deleteGroups on a non-empty group: NON_EMPTY_GROUP
    await assert.rejects(admin.deleteGroups([groupId]), e => {
      const types = [e.type, ...(e.groups || []).map(x => x.error && x.error.type)]
      return types.includes('NON_EMPTY_GROUP') || /not empty/i.test(String(e.message))
    })
  } finally {
    await a.consumer.disconnect()
    await b.consumer.disconnect()
  }
  assert.deepEqual([...a.crashes, ...b.crashes], [])

  // Empty group: reset (earliest) and set offsets, then a new member resumes from them.
  const empty = await admin.describeGroups([groupId])
  assert.equal(empty.groups[0].state, 'Empty')
  assert.equal(empty.groups[0].members.length, 0)
  // kafkajs commits the sentinels -2 (earliest) / -1 (latest); its consumer resolves them
  await admin.resetOffsets({ groupId, topic, earliest: true })
  let offsets = await admin.fetchOffsets({ groupId, topics: [topic] })
  assert.deepEqual(offsets[0].partitions.map(p => p.offset), ['-2', '-2', '-2', '-2', '-2', '-2'])
  await admin.setOffsets({ groupId, topic, partitions: [0, 1, 2, 3, 4, 5].map(p => ({ partition: p, offset: String(15 + (p % 2)) })) })
  offsets = await admin.fetchOffsets({ groupId, topics: [topic] })
  assert.deepEqual(offsets[0].partitions.sort((x, y) => x.partition - y.partition).map(p => p.offset),
    ['15', '16', '15', '16', '15', '16'])

  const c = await startMember(groupId, topic, 'c')
  try {
    await waitFor(() => c.messages.length >= 27, 'resumed consumption')
    await new Promise(resolve => setTimeout(resolve, 300)) // nothing beyond the 27 remaining records
    assert.equal(c.messages.length, 27)
    for (let p = 0; p < 6; p++) {
      const first = c.messages.find(m => m.partition === p)
      assert.equal(first.offset, 15 + (p % 2), `partition ${p} resumed at the set offset`)
    }
  } finally {
    await c.consumer.disconnect()
  }

  // latest reset, then delete the (empty) group
  await admin.resetOffsets({ groupId, topic })
  offsets = await admin.fetchOffsets({ groupId, topics: [topic] })
  assert.ok(offsets[0].partitions.every(p => p.offset === '-1'), JSON.stringify(offsets))
  await admin.deleteGroups([groupId])
  const after = await admin.listGroups()
  assert.ok(!after.groups.some(g => g.groupId === groupId))
})

test('a member that disconnects hands its partitions to the other (kafkajs)', async () => {
  const topic = uniq('leave')
  const groupId = uniq('group')
  assert.equal(await admin.createTopics({ topics: [{ topic, numPartitions: 6, replicationFactor: 1 }] }), true)
  const a = await startMember(groupId, topic, 'a')
  const b = await startMember(groupId, topic, 'b')
  try {
    await waitFor(() => a.assigned.length === 3 && b.assigned.length === 3, '3+3')
    await b.consumer.disconnect() // LeaveGroup
    await waitFor(() => a.assigned.length === 6, 'a takes all 6')
    const values = await produceSpread(topic, 6, 5)
    await waitFor(() => a.messages.length >= values.length, 'a consumes everything')
    assert.deepEqual(a.messages.map(m => m.value).sort(), values.slice().sort())
  } finally {
    await a.consumer.disconnect()
  }
})
