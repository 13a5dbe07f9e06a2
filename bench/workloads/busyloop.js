// busyloop.js: the node workload of the busy suite. It burns ~5 ms of CPU,
// then sleeps 45 ms, forever (the bench kills it).
'use strict';

function burn(ms) {
  const end = Date.now() + ms;
  let x = 0;
  while (Date.now() < end) {
    x += Math.sqrt(x + 1);
  }
  return x;
}

function tick() {
  burn(5);
  setTimeout(tick, 45);
}

tick();
