# A Ruby workload with known answers for the Ruby runtime's tests.
# Usage: ruby rubywork.rb SECONDS; prints "ready", then its pid, once running.
# The main thread burns CPU in spin, called from a block in work, called
# from <main>. Lines marked "# line:NAME" are the lines the tests expect.
class Burner
  def spin(n) # line:spin_def
    x = 0
    i = 0
    while i < n
      x += i * i # line:spin
      i += 1
    end
    x # line:spin_end
  end

  def work(deadline)
    while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
      3.times do # line:work_times
        spin(20_000) # line:work_block
      end
    end
  end
end

seconds = Float(ARGV[0] || "30")
$stdout.sync = true
puts "ready"
puts Process.pid
Burner.new.work(Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds) # line:main
