<?php
// A PHP workload whose JIT'd code calls native code: internal functions
// (md5, str_repeat, sort) and the engine's helpers (concatenation, array
// growth), for the PHP runtime's test that native frames called from JIT
// code unwind through the JIT buffer (TestJITFrameLive).
// Usage: php phpjitcalls.php [SECONDS]; prints "ready", then its pid, and
// runs for SECONDS (default 60) seconds.

function churn($n)
{
    $s = "";
    $a = [];
    for ($i = 0; $i < $n; $i++) {
        $s .= str_repeat("ab", $i % 64);
        $a[] = md5($s);
        if (count($a) > 32) {
            sort($a);
            $a = [];
            $s = "";
        }
    }
    return count($a);
}

$seconds = isset($argv[1]) ? (float)$argv[1] : 60.0;
echo "ready\n", getmypid(), "\n";
$deadline = microtime(true) + $seconds;
while (microtime(true) < $deadline) {
    churn(10000);
}
