'use strict';
// A two-byte source (UTF-16 in V8): « ½ » are Latin-1, these are not: ✓ 計算.
module.exports = function 計算(n) {
  return n + 1;
};
