'use strict';
// A known chain for the V8 walker: main -> work -> spin, CPU-bound, on the
// main thread, for argv[2] seconds (default 30). Lines are asserted.
function spin(n) {
  let x = 0;
  for (let i = 0; i < n; i++) {
    x += Math.sqrt(i + (x % 7));
  }
  return x;
}

function work(rounds) {
  let t = 0;
  for (let r = 0; r < rounds; r++) {
    t += spin(200000);
  }
  return t;
}

async function later() {
  await null;
  return work(5);
}

function main() {
  const end = Date.now() + Number(process.argv[2] || 30) * 1000;
  let t = 0;
  while (Date.now() < end) {
    t += work(20);
  }
  return t;
}

if (process.argv[3] === 'async') {
  (async () => {
    const end = Date.now() + Number(process.argv[2] || 30) * 1000;
    while (Date.now() < end) await later();
  })();
} else {
  main();
}
