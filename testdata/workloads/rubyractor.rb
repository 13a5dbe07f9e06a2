# rubyractor.rb: two Ractors each burning CPU in rubywork.rb's chain,
# Burner#spin under a block in Burner#work under Burner#work, called from
# the Ractor's block, while the main thread waits for them (ruby
# rubyractor.rb SECONDS); prints "ready", then its pid, then the native
# thread id of each Ractor's thread, once both run.
# A non-main Ractor's threads run on native threads of their own, the
# thread-local ruby_current_ec pointing at the Ractor's thread's context.
# Lines marked "# line:NAME" are the lines the tests expect.
Warning[:experimental] = false # "Ractor is experimental" would come before "ready"

class Burner
  def spin(n)
    x = 0
    i = 0
    while i < n
      x += i * i
      i += 1
    end
    x
  end

  def work(deadline)
    while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
      3.times do # line:work_times
        spin(20_000) # line:work_block
      end
    end
  end
end

deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + Float(ARGV[0] || "30")
$stdout.sync = true
ractors = []
while ractors.size < 2 # no block: each Ractor's is "block in <main>"
  ractors << Ractor.new(deadline) do |d|
    Ractor.yield(Thread.current.native_thread_id)
    Burner.new.work(d) # line:ractor_work
  end
end
tids = ractors.map(&:take) # each is running
puts "ready"
puts Process.pid
tids.each { |tid| puts tid }
ractors.each(&:take)
