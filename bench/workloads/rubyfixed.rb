# A fixed amount of pure-Ruby work for the bench's ruby suite: fib(25)
# ITERATIONS times under ruby_work. Prints its wall time in ns on stdout,
# "rubyfixed: cpu_ns N" and its pid ("rubyfixed: pid N") on stderr, like
# the other workloads.
def fib(n)
  n < 2 ? n : fib(n - 1) + fib(n - 2)
end

def ruby_work(iterations)
  total = 0
  i = 0
  while i < iterations
    total += fib(25)
    i += 1
  end
  total
end

iterations = Integer(ARGV[0])
cpu0 = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID, :nanosecond)
wall0 = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
total = ruby_work(iterations)
wall = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) - wall0
cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID, :nanosecond) - cpu0
$stderr.puts "rubyfixed: #{iterations} iterations, checksum #{total}"
$stderr.puts "rubyfixed: pid #{Process.pid}"
$stderr.puts "rubyfixed: cpu_ns #{cpu}"
puts wall
