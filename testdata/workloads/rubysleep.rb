# An off-CPU Ruby workload with known answers: Napper#nap sleeps 10 ms at a
# time, called from work, called from <main>.
# Usage: ruby rubysleep.rb SECONDS; prints "ready", then its pid.
# Lines marked "# line:NAME" are the lines the tests expect.
class Napper
  def nap
    sleep 0.01 # line:nap_sleep
  end

  def work(deadline)
    while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
      nap # line:work_call
    end
  end
end

seconds = Float(ARGV[0] || "30")
$stdout.sync = true
puts "ready"
puts Process.pid
Napper.new.work(Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds) # line:main
