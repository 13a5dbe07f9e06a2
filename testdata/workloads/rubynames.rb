# A Ruby workload for the names of C methods and singleton methods.
# Usage: ruby rubynames.rb SECONDS; prints "ready", then its pid, once running.
# The main thread burns CPU in a block under Array#each (a C method) in
# Tally.add_up (a module_function: a singleton method), called from a block
# under Integer#times in Burner.helper (def self.helper).
module Tally
  module_function

  def add_up(items)
    sum = 0
    items.each do |i| # line:each
      j = 0
      while j < 2_000
        sum += i ^ j # line:spin
        j += 1
      end
    end
    sum
  end
end

class Burner
  def self.helper(deadline)
    while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
      3.times { Tally.add_up([1, 2, 3, 4]) } # line:times
    end
  end
end

seconds = Float(ARGV[0] || "30")
$stdout.sync = true
puts "ready"
puts Process.pid
Burner.helper(Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds) # line:main
