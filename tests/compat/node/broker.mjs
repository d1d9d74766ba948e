// Starts a real `moldau server` for the kafkajs tests: port 0 on 127.0.0.1, its own temp data
// dir, readiness = a raw ApiVersions v0 round trip within a deadline, stop = SIGTERM + exit 0.
import { spawn, spawnSync } from 'node:child_process'
import { mkdtempSync, openSync, readFileSync, rmSync, existsSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import net from 'node:net'
import { once } from 'node:events'

const START_TIMEOUT_MS = 30_000
const STOP_TIMEOUT_MS = 15_000
const LISTEN_RE = /^moldau: listening on 127\.0\.0\.1:(\d+), data in (.+)$/

export function moldauBin () {
  const bin = process.env.MOLDAU_BIN || resolve(import.meta.dirname, '../../../target/debug/moldau')
  if (!existsSync(bin)) throw new Error(`moldau binary not found at ${bin} (set MOLDAU_BIN)`)
  return bin
}

function apiVersionsOnce (port, timeoutMs) {
  return new Promise((resolvePromise, reject) => {
    const sock = net.connect({ host: '127.0.0.1', port })
    const timer = setTimeout(() => { sock.destroy(); reject(new Error('ApiVersions timeout')) }, timeoutMs)
    let buf = Buffer.alloc(0)
    sock.on('connect', () => {
      const clientId = Buffer.from('compat-node')
      const header = Buffer.alloc(10)
      header.writeInt16BE(18, 0) // ApiVersions
      header.writeInt16BE(0, 2) // v0
      header.writeInt32BE(1, 4) // correlation id
      header.writeInt16BE(clientId.length, 8)
      const payload = Buffer.concat([header, clientId])
      const size = Buffer.alloc(4)
      size.writeInt32BE(payload.length, 0)
      sock.write(Buffer.concat([size, payload]))
    })
    sock.on('data', chunk => {
      buf = Buffer.concat([buf, chunk])
      if (buf.length >= 4 && buf.length >= 4 + buf.readInt32BE(0)) {
        clearTimeout(timer)
        sock.destroy()
        const corr = buf.readInt32BE(4)
        const err = buf.readInt16BE(8)
        if (corr === 1 && err === 0) resolvePromise()
        else reject(new Error(`bad ApiVersions response corr=${corr} err=${err}`))
      }
    })
    sock.on('error', e => { clearTimeout(timer); reject(e) })
  })
}

export class Moldau {
  constructor (settings = {}) {
    this.dir = mkdtempSync(join(tmpdir(), 'moldau-node-'))
    this.dataDir = join(this.dir, 'data')
    this.logPath = join(this.dir, 'broker.log')
    this.settings = settings
    this.proc = null
    this.port = null
  }

  get bootstrap () { return `127.0.0.1:${this.port}` }

  logTail () {
    try { return readFileSync(this.logPath, 'utf8').slice(-6000) } catch { return '<no log>' }
  }

  async start () {
    const args = ['server', '--listen', '127.0.0.1:0', '--data-dir', this.dataDir]
    for (const [k, v] of Object.entries(this.settings)) args.push('--set', `${k}=${v}`)
    const log = openSync(this.logPath, 'a')
    this.proc = spawn(moldauBin(), args, { stdio: ['ignore', 'pipe', log] })
    const deadline = Date.now() + START_TIMEOUT_MS
    const line = await new Promise((resolveLine, reject) => {
      let buf = ''
      const timer = setTimeout(() => reject(new Error(`no listen line within ${START_TIMEOUT_MS} ms\n${this.logTail()}`)), START_TIMEOUT_MS)
      this.proc.stdout.on('data', chunk => {
        buf += chunk.toString()
        const nl = buf.indexOf('\n')
        if (nl >= 0 && timer) { clearTimeout(timer); resolveLine(buf.slice(0, nl)) }
      })
      this.proc.on('exit', code => { clearTimeout(timer); reject(new Error(`moldau exited early (${code})\n${this.logTail()}`)) })
    })
    const m = LISTEN_RE.exec(line.trim())
    if (!m) throw new Error(`unexpected listen line ${JSON.stringify(line)}`)
    this.port = Number(m[1])
    // A TLS-only listener cannot answer the plaintext probe: its tests wait with a TLS client.
    if (this.settings.listeners && /^(SSL|SASL_SSL):/.test(this.settings.listeners)) return this
    let lastErr
    while (Date.now() < deadline) {
      try { await apiVersionsOnce(this.port, 2000); return this } catch (e) { lastErr = e }
      await new Promise(r => setTimeout(r, 50))
    }
    throw new Error(`moldau not ready: ${lastErr}\n${this.logTail()}`)
  }

  alive () { return this.proc !== null && this.proc.exitCode === null && this.proc.signalCode === null }

  async stop () {
    if (!this.proc) return
    const proc = this.proc
    this.proc = null
    if (proc.exitCode === null && proc.signalCode === null) {
      const exited = once(proc, 'exit')
      proc.kill('SIGTERM')
      let timer
      const timeout = new Promise(r => { timer = setTimeout(() => r('timeout'), STOP_TIMEOUT_MS) })
      const outcome = await Promise.race([exited, timeout])
      clearTimeout(timer) // a pending timer would keep node alive for STOP_TIMEOUT_MS
      if (outcome === 'timeout') {
        proc.kill('SIGKILL')
        throw new Error(`moldau did not exit within ${STOP_TIMEOUT_MS} ms of SIGTERM\n${this.logTail()}`)
      }
    }
    if (proc.exitCode !== 0) throw new Error(`moldau exit code ${proc.exitCode} signal ${proc.signalCode} (expected 0)\n${this.logTail()}`)
    rmSync(this.dir, { recursive: true, force: true })
  }
}

// Read a partition back with kcat (kafkajs's consumer needs consumer groups).
export function kcatConsume (bootstrap, topic, partition, count) {
  const res = spawnSync('kcat', ['-C', '-b', bootstrap, '-t', topic, '-p', String(partition), '-o', 'beginning',
    '-c', String(count), '-e', '-J', '-q'], { timeout: 30_000, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })
  if (res.status !== 0) throw new Error(`kcat failed (${res.status}): ${res.stderr}`)
  return res.stdout.split('\n').filter(l => l.trim()).map(l => JSON.parse(l))
}

// Kafka's murmur2 (Utils.murmur2) and the Java default partitioner, written from the algorithm.
export function murmur2 (buf) {
  const m = 0x5bd1e995
  const len = buf.length
  let h = (0x9747b28c ^ len) | 0
  const end = len - (len % 4)
  for (let i = 0; i < end; i += 4) {
    let k = buf.readInt32LE(i)
    k = Math.imul(k, m)
    k ^= k >>> 24
    k = Math.imul(k, m)
    h = Math.imul(h, m) ^ k
  }
  switch (len % 4) {
    case 3: h ^= buf[end + 2] << 16 // falls through
    case 2: h ^= buf[end + 1] << 8 // falls through
    case 1: h ^= buf[end]; h = Math.imul(h, m)
  }
  h ^= h >>> 13
  h = Math.imul(h, m)
  h ^= h >>> 15
  return h | 0
}

export function javaPartition (key, partitions) {
  return (murmur2(Buffer.from(key)) & 0x7fffffff) % partitions
}
