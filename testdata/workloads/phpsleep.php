<?php
// An off-CPU PHP workload with known answers: nap sleeps 10 ms at a time
// (usleep), called from work, called from {main}.
// Usage: php phpsleep.php [SECONDS]; prints "ready", then its pid.
// Lines marked "// line:NAME" are the lines the tests expect.

function nap()
{
    usleep(10000); // line:nap_sleep
}

function work($deadline)
{
    while (microtime(true) < $deadline) {
        nap(); // line:work_call
    }
}

$seconds = isset($argv[1]) ? (float)$argv[1] : 60.0;
echo "ready\n", getmypid(), "\n";
work(microtime(true) + $seconds); // line:main_call
