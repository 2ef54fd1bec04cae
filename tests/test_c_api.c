/* placeholder replaced by the test suite */
int main(void) { return 0; }
