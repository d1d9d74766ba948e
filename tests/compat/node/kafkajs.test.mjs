// kafkajs 2.2.4 against a real moldau server: admin (topics, configs, partitions, offsets,
// DeleteRecords) and the producer (codecs kafkajs ships: none, gzip; acks; idempotence; keys ->
// murmur2 partitions). Records are read back with kcat, since kafkajs's consumer needs groups.
import { test, before, after, describe } from 'node:test'
import assert from 'node:assert/strict'
import kafkajs from 'kafkajs'
import { Moldau, kcatConsume, javaPartition } from './broker.mjs'

const { Kafka, logLevel, CompressionTypes, ConfigResourceTypes, ConfigSource, Partitioners } = kafkajs

let broker
let kafka
let admin
let seq = 0
const topicName = base => `kafkajs-${base}-${process.pid}-${++seq}`

function errorTypes (e) {
  const types = [e.type]
  for (const inner of e.errors || []) types.push(inner.type, ...errorTypes(inner))
  if (e.originalError) types.push(...errorTypes(e.originalError))
  return types.filter(Boolean)
}

async function configsOf (topic, names) {
  const res = await admin.describeConfigs({
    includeSynonyms: false,
    resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: names }]
  })
  assert.equal(res.resources.length, 1)
  assert.equal(res.resources[0].errorCode, 0)
  return Object.fromEntries(res.resources[0].configEntries.map(e => [e.configName, e]))
}

before(async () => {
  broker = await new Moldau({ 'num.partitions': 1 }).start()
  kafka = new Kafka({
    clientId: 'moldau-compat',
    brokers: [broker.bootstrap],
    logLevel: logLevel.NOTHING,
    connectionTimeout: 5000,
    requestTimeout: 10000,
    retry: { retries: 3, initialRetryTime: 100 }
  })
  admin = kafka.admin()
  await admin.connect()
})

after(async () => {
  try { if (admin) await admin.disconnect() } finally { if (broker) await broker.stop() }
})

describe('admin', () => {
  test('cluster and topic metadata', async () => {
    const topic = topicName('meta')
    assert.equal(await admin.createTopics({ topics: [{ topic, numPartitions: 3, replicationFactor: 1 }] }), true)
    const cluster = await admin.describeCluster()
    assert.deepEqual(cluster.brokers.map(b => [b.nodeId, b.host, b.port]), [[1, '127.0.0.1', broker.port]])
    assert.equal(cluster.controller, 1)
    assert.ok(cluster.clusterId)
    assert.ok((await admin.listTopics()).includes(topic))
    const md = await admin.fetchTopicMetadata({ topics: [topic] })
    assert.equal(md.topics.length, 1)
    const parts = md.topics[0].partitions.sort((a, b) => a.partitionId - b.partitionId)
    assert.deepEqual(parts.map(p => [p.partitionId, p.leader, p.replicas, p.isr, p.partitionErrorCode]),
      [[0, 1, [1], [1], 0], [1, 1, [1], [1], 0], [2, 1, [1], [1], 0]])
  })

  test('create with configs, describe values and sources, already exists', async () => {
    const topic = topicName('cfg')
    assert.equal(await admin.createTopics({
      topics: [{ topic, numPartitions: 2, replicationFactor: 1, configEntries: [{ name: 'retention.ms', value: '3600000' }] }]
    }), true)
    const cfg = await configsOf(topic, ['retention.ms', 'cleanup.policy', 'max.message.bytes'])
    assert.deepEqual([cfg['retention.ms'].configValue, cfg['retention.ms'].configSource, cfg['retention.ms'].isDefault],
      ['3600000', ConfigSource.TOPIC_CONFIG, false])
    assert.deepEqual([cfg['cleanup.policy'].configValue, cfg['cleanup.policy'].configSource],
      ['delete', ConfigSource.DEFAULT_CONFIG])
    assert.deepEqual([cfg['max.message.bytes'].configValue, cfg['max.message.bytes'].configSource],
      ['1048588', ConfigSource.DEFAULT_CONFIG])
    // kafkajs maps TOPIC_ALREADY_EXISTS to a `false` result
    assert.equal(await admin.createTopics({ topics: [{ topic, numPartitions: 1, replicationFactor: 1 }] }), false)
  })

  test('validateOnly does not create; invalid partitions and replication factor are refused', async () => {
    const topic = topicName('vo')
    await admin.createTopics({ validateOnly: true, waitForLeaders: false, topics: [{ topic, numPartitions: 2, replicationFactor: 1 }] })
    assert.ok(!(await admin.listTopics()).includes(topic))
    await assert.rejects(
      admin.createTopics({ waitForLeaders: false, topics: [{ topic, numPartitions: 0, replicationFactor: 1 }] }),
      e => errorTypes(e).includes('INVALID_PARTITIONS'))
    await assert.rejects(
      admin.createTopics({ waitForLeaders: false, topics: [{ topic, numPartitions: 1, replicationFactor: 3 }] }),
      e => errorTypes(e).includes('INVALID_REPLICATION_FACTOR'))
    assert.ok(!(await admin.listTopics()).includes(topic))
  })

  test('alterConfigs replaces the topic config set', async () => {
    const topic = topicName('alter')
    await admin.createTopics({
      topics: [{ topic, numPartitions: 1, replicationFactor: 1, configEntries: [{ name: 'cleanup.policy', value: 'compact' }] }]
    })
    await admin.alterConfigs({
      validateOnly: false,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configEntries: [{ name: 'retention.ms', value: '120000' }] }]
    })
    const cfg = await configsOf(topic, ['retention.ms', 'cleanup.policy'])
    assert.deepEqual([cfg['retention.ms'].configValue, cfg['retention.ms'].configSource], ['120000', ConfigSource.TOPIC_CONFIG])
    assert.deepEqual([cfg['cleanup.policy'].configValue, cfg['cleanup.policy'].configSource], ['delete', ConfigSource.DEFAULT_CONFIG])
    await assert.rejects(admin.alterConfigs({
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configEntries: [{ name: 'retention.ms', value: 'never' }] }]
    }), e => errorTypes(e).includes('INVALID_CONFIG'))
  })

  test('createPartitions grows, refuses to shrink', async () => {
    const topic = topicName('parts')
    await admin.createTopics({ topics: [{ topic, numPartitions: 1, replicationFactor: 1 }] })
    await admin.createPartitions({ topicPartitions: [{ topic, count: 4 }] })
    const md = await admin.fetchTopicMetadata({ topics: [topic] })
    assert.equal(md.topics[0].partitions.length, 4)
    await assert.rejects(admin.createPartitions({ topicPartitions: [{ topic, count: 2 }] }),
      e => errorTypes(e).includes('INVALID_PARTITIONS'))
  })

  test('deleteTopics then recreate starts empty', async () => {
    const topic = topicName('del')
    await admin.createTopics({ topics: [{ topic, numPartitions: 1, replicationFactor: 1 }] })
    const producer = kafka.producer()
    await producer.connect()
    await producer.send({ topic, messages: [{ value: 'a' }, { value: 'b' }] })
    await producer.disconnect()
    await admin.deleteTopics({ topics: [topic] })
    assert.ok(!(await admin.listTopics()).includes(topic))
    assert.equal(await admin.createTopics({ topics: [{ topic, numPartitions: 2, replicationFactor: 1 }] }), true)
    const offsets = await admin.fetchTopicOffsets(topic)
    assert.deepEqual(offsets.map(o => [o.partition, o.low, o.high]).sort(), [[0, '0', '0'], [1, '0', '0']])
  })

  test('offsets: latest/earliest, by timestamp, deleteTopicRecords', async () => {
    const topic = topicName('offsets')
    await admin.createTopics({ topics: [{ topic, numPartitions: 1, replicationFactor: 1 }] })
    const base = Date.now() - 600_000
    const producer = kafka.producer()
    await producer.connect()
    await producer.send({ topic, messages: Array.from({ length: 10 }, (_, i) => ({ value: `v${i}`, timestamp: String(base + 1000 * i), partition: 0 })) })
    await producer.disconnect()
    assert.deepEqual((await admin.fetchTopicOffsets(topic)).map(o => [o.partition, o.low, o.high]), [[0, '0', '10']])
    assert.deepEqual(await admin.fetchTopicOffsetsByTimestamp(topic, base + 2500), [{ partition: 0, offset: '3' }])
    await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: '4' }] })
    assert.deepEqual((await admin.fetchTopicOffsets(topic)).map(o => [o.low, o.high]), [['4', '10']])
  })
})

describe('producer', () => {
  for (const [name, compression] of [['none', CompressionTypes.None], ['gzip', CompressionTypes.GZIP]]) {
    for (const idempotent of [false, true]) {
      test(`produce ${name}${idempotent ? ' idempotent' : ''}: byte-exact read back with kcat`, async () => {
        const topic = topicName(`p-${name}`)
        const producer = kafka.producer({ idempotent, maxInFlightRequests: idempotent ? 1 : undefined })
        await producer.connect()
        const base = Date.now() - 60_000
        const text = 'moldau kafkajs payload '.repeat(30)
        const messages = [
          { key: 'k0', value: `v0 ${text}`, headers: { h1: 'a', h2: 'b' }, timestamp: String(base), partition: 0 },
          { key: null, value: 'null key', timestamp: String(base + 1), partition: 0 },
          { key: 'null-value', value: null, timestamp: String(base + 2), partition: 0 },
          { key: 'k3', value: `\u2603 ${text}`, headers: { only: 'one' }, timestamp: String(base + 3), partition: 0 }
        ]
        const res = await producer.send({ topic, compression, acks: -1, messages })
        await producer.disconnect()
        assert.deepEqual(res.map(r => [r.topicName, r.partition, r.errorCode, r.baseOffset]), [[topic, 0, 0, '0']])
        const got = kcatConsume(broker.bootstrap, topic, 0, 4)
        assert.deepEqual(got.map(m => [m.offset, m.key, m.payload, m.ts, m.headers ?? []]), [
          [0, 'k0', `v0 ${text}`, base, ['h1', 'a', 'h2', 'b']],
          [1, null, 'null key', base + 1, []],
          [2, 'null-value', null, base + 2, []],
          [3, 'k3', `\u2603 ${text}`, base + 3, ['only', 'one']]
        ])
      })
    }
  }

  for (const acks of [0, 1, -1]) {
    test(`acks=${acks}`, async () => {
      const topic = topicName(`acks${acks}`)
      await admin.createTopics({ topics: [{ topic, numPartitions: 1, replicationFactor: 1 }] })
      const producer = kafka.producer()
      await producer.connect()
      for (let i = 0; i < 5; i++) {
        await producer.send({ topic, acks, messages: Array.from({ length: 20 }, (_, j) => ({ value: `m${i * 20 + j}` })) })
      }
      await producer.disconnect()
      const got = kcatConsume(broker.bootstrap, topic, 0, 100)
      assert.deepEqual(got.map(m => m.payload), Array.from({ length: 100 }, (_, i) => `m${i}`))
    })
  }

  test('keys land on the murmur2 partition, in order', async () => {
    const topic = topicName('keys')
    await admin.createTopics({ topics: [{ topic, numPartitions: 3, replicationFactor: 1 }] })
    const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner })
    await producer.connect()
    const messages = Array.from({ length: 120 }, (_, i) => ({ key: `user-${i % 17}`, value: String(i) }))
    await producer.send({ topic, messages })
    await producer.disconnect()
    const offsets = await admin.fetchTopicOffsets(topic)
    let total = 0
    for (const { partition, high } of offsets) {
      const n = Number(high)
      total += n
      if (n === 0) continue
      const got = kcatConsume(broker.bootstrap, topic, partition, n)
      const values = got.map(m => Number(m.payload))
      assert.deepEqual(values, [...values].sort((a, b) => a - b), `partition ${partition} out of order`)
      for (const m of got) assert.equal(javaPartition(m.key, 3), partition, `key ${m.key}`)
    }
    assert.equal(total, 120)
  })

  test('message too large', async () => {
    const topic = topicName('large')
    await admin.createTopics({ topics: [{ topic, numPartitions: 1, replicationFactor: 1, configEntries: [{ name: 'max.message.bytes', value: '2048' }] }] })
    const producer = kafka.producer({ retry: { retries: 0 } })
    await producer.connect()
    const big = Buffer.alloc(8000)
    for (let i = 0; i < big.length; i++) big[i] = (i * 7919) % 251
    await assert.rejects(producer.send({ topic, messages: [{ value: big }] }),
      e => errorTypes(e).includes('MESSAGE_TOO_LARGE'))
    await producer.disconnect()
  })
})

test('broker still alive', () => {
  assert.ok(broker.alive(), broker.logTail())
})
