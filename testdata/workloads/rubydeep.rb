# A Ruby workload for the BPF walker's tests (bpf/ruby.h).
# Usage: ruby rubydeep.rb SECONDS; prints "ready", then its pid, once running.
# Two threads burn CPU in spin: the main thread at the bottom of a recursion
# of deep 200 frames deep (more than a walk keeps), the thread named "side"
# called from side. Lines marked "# line:NAME" are the lines the tests expect.
def spin(n) # line:spin_def
  x = 0
  i = 0
  while i < n
    x += i * i
    i += 1
  end
  x # line:spin_end
end

def deep(depth, deadline)
  return deep(depth - 1, deadline) if depth > 0 # line:deep_call
  spin(20_000) while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline # line:deep_spin
end

def side(deadline)
  spin(20_000) while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline # line:side_spin
end

deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + Float(ARGV[0] || "30")
$stdout.sync = true
thread = Thread.new { side(deadline) } # line:side_block
thread.name = "side"
puts "ready"
puts Process.pid
deep(200, deadline) # line:main
thread.join
