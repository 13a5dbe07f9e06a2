'use strict';
// Functions at known lines, found by the live test (names_linux_test.go).
function spin(n) {
  let s = 0;
  for (let i = 0; i < n; i++) s += i % 7;
  return s;
}
const anon = (function () { return function (x) { return x * 2; }; })();
class Widget {
  measure(k) {
    let t = 0;
    for (let j = 0; j < k; j++) t ^= j;
    return t;
  }
}
function captures() {
  let a = 1, b = 2;
  return function inner() { return a + b; };
}
const nfe = function named(x) { return x > 0 ? named(x - 1) : 0; };
const arrow = (y) => y + 1;
function manyLocals() {
  let v0 = 0;
  let v1 = 1;
  let v2 = 2;
  let v3 = 3;
  let v4 = 4;
  let v5 = 5;
  let v6 = 6;
  let v7 = 7;
  let v8 = 8;
  let v9 = 9;
  let v10 = 10;
  let v11 = 11;
  let v12 = 12;
  let v13 = 13;
  let v14 = 14;
  let v15 = 15;
  let v16 = 16;
  let v17 = 17;
  let v18 = 18;
  let v19 = 19;
  let v20 = 20;
  let v21 = 21;
  let v22 = 22;
  let v23 = 23;
  let v24 = 24;
  let v25 = 25;
  let v26 = 26;
  let v27 = 27;
  let v28 = 28;
  let v29 = 29;
  let v30 = 30;
  let v31 = 31;
  let v32 = 32;
  let v33 = 33;
  let v34 = 34;
  let v35 = 35;
  let v36 = 36;
  let v37 = 37;
  let v38 = 38;
  let v39 = 39;
  let v40 = 40;
  let v41 = 41;
  let v42 = 42;
  let v43 = 43;
  let v44 = 44;
  let v45 = 45;
  let v46 = 46;
  let v47 = 47;
  let v48 = 48;
  let v49 = 49;
  let v50 = 50;
  let v51 = 51;
  let v52 = 52;
  let v53 = 53;
  let v54 = 54;
  let v55 = 55;
  let v56 = 56;
  let v57 = 57;
  let v58 = 58;
  let v59 = 59;
  let v60 = 60;
  let v61 = 61;
  let v62 = 62;
  let v63 = 63;
  let v64 = 64;
  let v65 = 65;
  let v66 = 66;
  let v67 = 67;
  let v68 = 68;
  let v69 = 69;
  let v70 = 70;
  let v71 = 71;
  let v72 = 72;
  let v73 = 73;
  let v74 = 74;
  let v75 = 75;
  let v76 = 76;
  let v77 = 77;
  let v78 = 78;
  let v79 = 79;
  return () => v0 + v1 + v2 + v3 + v4 + v5 + v6 + v7 + v8 + v9 + v10 + v11 + v12 + v13 + v14 + v15 + v16 + v17 + v18 + v19 + v20 + v21 + v22 + v23 + v24 + v25 + v26 + v27 + v28 + v29 + v30 + v31 + v32 + v33 + v34 + v35 + v36 + v37 + v38 + v39 + v40 + v41 + v42 + v43 + v44 + v45 + v46 + v47 + v48 + v49 + v50 + v51 + v52 + v53 + v54 + v55 + v56 + v57 + v58 + v59 + v60 + v61 + v62 + v63 + v64 + v65 + v66 + v67 + v68 + v69 + v70 + v71 + v72 + v73 + v74 + v75 + v76 + v77 + v78 + v79;
}
const w = new Widget();
const inner = captures();
const sum = manyLocals();
spin(10); anon(1); w.measure(3); inner(); nfe(3); arrow(1); sum();
const wide = require('./wide.js');
wide(1);
if (process.env.NAMES_STACK) void new Error().stack; // line ends computed
if (process.env.NAMES_DEBUG) { // a breakpoint: spin gets a DebugInfo
  const s = new (require('inspector').Session)();
  s.connect();
  s.post('Debugger.enable', () => {});
  s.post('Debugger.setBreakpointByUrl', { lineNumber: 4, url: require('url').pathToFileURL(__filename).href }, () => {});
}
function lazy() { return 1; } // never called: uncompiled
const internal = [require('fs').readFileSync, require('path').join];
for (const f of internal) {
  const src = %FunctionGetScriptSource(f), pos = %FunctionGetScriptSourcePosition(f);
  console.log('LINE', src.slice(0, pos).split('\n').length);
}
for (const f of [spin, anon, w.measure, inner, nfe, arrow, manyLocals, sum, wide, lazy, ...internal]) %DebugPrint(f);
console.log('READY');
setInterval(() => {}, 1000);
