// Fixture for symbolize tests: a namespaced C++ function.
#include <cstdio>

namespace shapes {
struct Circle {
	__attribute__((noinline)) double area(double r) const { return 3.14159 * r * r; }
};
__attribute__((noinline)) int perimeter(int side) { return side * 4; }
}  // namespace shapes

int main() {
	shapes::Circle c;
	double a = c.area(2.0) + shapes::perimeter(3);
	std::printf("shapes::perimeter=%p\n", (void *)&shapes::perimeter);
	std::printf("ready %d\n", (int)a);
	std::fflush(stdout);
	while (std::getchar() != EOF) {
	}
	return 0;
}
