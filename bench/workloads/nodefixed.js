// A fixed amount of JavaScript work for the bench's node suite: main calls
// work, which calls spin ITERATIONS times, each a loop of float math. work's
// own loop runs too few times for V8 to optimize it, so spin (optimized on
// its own) is not inlined into it and every sample of the hot loop has
// spin, work and main on its stack. Prints its wall time in ns on stdout,
// "nodefixed: cpu_ns N" on stderr, like the other workloads, and its pid
// ("nodefixed: pid N": the bench finds its samples and perf map by it).
'use strict';

function spin(n) {
  let x = 1.0;
  for (let i = 0; i < n; i++) {
    x = Math.sqrt(x * 1.000001 + i) * 0.5 + Math.sin(x);
  }
  return x;
}

function work(iterations) {
  let sink = 0;
  for (let i = 0; i < iterations; i++) {
    sink += spin(1000000);
  }
  return sink;
}

function main() {
  const iterations = Number(process.argv[2]);
  if (!Number.isInteger(iterations) || iterations < 1) {
    throw new Error('usage: node nodefixed.js ITERATIONS');
  }
  const cpu0 = process.cpuUsage();
  const wall0 = process.hrtime.bigint();
  const sink = work(iterations);
  const wall = process.hrtime.bigint() - wall0;
  const cpu = process.cpuUsage(cpu0);
  process.stderr.write(`nodefixed: ${iterations} iterations, checksum ${sink}\n`);
  process.stderr.write(`nodefixed: pid ${process.pid}\n`);
  process.stderr.write(`nodefixed: cpu_ns ${(cpu.user + cpu.system) * 1000}\n`);
  process.stdout.write(`${wall}\n`);
}

main();
