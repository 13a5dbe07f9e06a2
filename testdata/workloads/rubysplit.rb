# rubysplit.rb: two Ruby threads taking turns burning CPU 3:1, thread a in
# work_a, thread b in work_b (ruby rubysplit.rb SECONDS); prints "ready",
# then its pid, once both run. Each turn burns a share of the thread's own
# CPU time, not a count of iterations, so the split holds with or without
# YJIT and however busy the machine is. The GVL lets one thread run at a
# time; the turn passes through two Queues.
SLICE = 0.0037 # seconds of the thread's CPU time per share (a turn of a and b, 14.8 ms, no multiple of a 99 Hz sampling period)

def cpu_now
  Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
end

def work_a
  until_t = cpu_now + 3 * SLICE
  x = 0
  while cpu_now < until_t
    i = 0
    while i < 2_000
      x ^= i * i
      i += 1
    end
  end
  x
end

def work_b
  until_t = cpu_now + SLICE
  x = 0
  while cpu_now < until_t
    i = 0
    while i < 2_000
      x ^= i * i
      i += 1
    end
  end
  x
end

# take_turns runs work while the deadline is ahead, each time after mine
# gives the turn, then gives it to theirs; at the end it gives theirs the
# turn once more so that it does not wait forever.
def take_turns(deadline, mine, theirs)
  while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
    mine.pop
    yield
    theirs.push(true)
  end
ensure
  theirs.push(true)
end

deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + Float(ARGV[0] || "30")
$stdout.sync = true
turn_a = Queue.new
turn_b = Queue.new
turn_a.push(true)
a = Thread.new { take_turns(deadline, turn_a, turn_b) { work_a } }
b = Thread.new { take_turns(deadline, turn_b, turn_a) { work_b } }
a.name = "a"
b.name = "b"
puts "ready"
puts Process.pid
a.join
b.join
