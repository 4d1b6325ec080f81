/* placeholder: replaced by the real entry point */
int main(void) { return 0; }
