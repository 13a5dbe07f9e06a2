<?php
// A fixed amount of pure-PHP work for the bench's php suite: fib(25)
// ITERATIONS times under php_work. Prints its wall time in ns on stdout,
// "phpfixed: cpu_ns N" and its pid ("phpfixed: pid N") on stderr, like
// the other workloads.

function fib($n)
{
    return $n < 2 ? $n : fib($n - 1) + fib($n - 2);
}

function php_work($iterations)
{
    $total = 0;
    for ($i = 0; $i < $iterations; $i++) {
        $total += fib(25);
    }
    return $total;
}

// cpu_ns is the process's user+system time in ns.
function cpu_ns()
{
    $u = getrusage();
    return ($u['ru_utime.tv_sec'] + $u['ru_stime.tv_sec']) * 1000000000
        + ($u['ru_utime.tv_usec'] + $u['ru_stime.tv_usec']) * 1000;
}

$iterations = (int)$argv[1];
$cpu0 = cpu_ns();
$wall0 = hrtime(true);
$total = php_work($iterations);
$wall = hrtime(true) - $wall0;
$cpu = cpu_ns() - $cpu0;
fwrite(STDERR, "phpfixed: $iterations iterations, checksum $total\n");
fwrite(STDERR, "phpfixed: pid " . getmypid() . "\n");
fwrite(STDERR, "phpfixed: cpu_ns $cpu\n");
echo $wall, "\n";
