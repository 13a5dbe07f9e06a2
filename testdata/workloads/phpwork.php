<?php
// A PHP workload with known answers for the PHP walker's tests.
// Usage: php phpwork.php [SECONDS], or a request for phpwork.php?seconds=
// SECONDS (php-fpm); prints "ready", then its pid, once running, and spins
// in Spinner::spin under work under {main} for SECONDS (default 60)
// seconds.
// Lines marked "// line:NAME" are the lines the tests expect.

class Spinner
{
    public $total = 0;

    public function spin($n)
    {
        $x = 0;
        for ($i = 0; $i < $n; $i++) { // line:spin_for
            $x = ($x * 31 + $i) % 1000003; // line:spin_loop
        }
        $this->total += $x;
        return $x;
    }
}

function work($spinner, $deadline)
{
    while (microtime(true) < $deadline) {
        $spinner->spin(100000); // line:work_call
    }
}

$seconds = isset($argv[1]) ? (float)$argv[1] : (float)($_GET['seconds'] ?? 60.0);
echo "ready\n", getmypid(), "\n";
work(new Spinner(), microtime(true) + $seconds); // line:main_call
