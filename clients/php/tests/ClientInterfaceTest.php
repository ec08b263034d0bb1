<?php

declare(strict_types=1);

namespace Veil\Tests;

use Veil\Budget;
use Veil\Client;
use Veil\ClientInterface;
use Veil\Estimate;

/**
 * An application type-hints ClientInterface and its tests hand it a mock: the interface names
 * every public method of Client, with the same signatures, so a mock is a drop-in.
 */
final class ClientInterfaceTest extends \PHPUnit\Framework\TestCase
{
    public function testTheClientImplementsTheInterface(): void
    {
        $this->assertContains(ClientInterface::class, class_implements(Client::class));
    }

    public function testTheInterfaceNamesEveryPublicMethodOfTheClient(): void
    {
        $public = static function (string $class): array {
            $names = [];
            foreach ((new \ReflectionClass($class))->getMethods(\ReflectionMethod::IS_PUBLIC) as $m) {
                if (!$m->isConstructor() && !$m->isStatic()) {
                    $names[] = $m->getName();
                }
            }
            sort($names);
            return $names;
        };
        $this->assertSame($public(Client::class), $public(ClientInterface::class));
    }

    public function testAnApplicationCanMockTheInterface(): void
    {
        $free = new Budget('pure', 0.0, 0.0, null, ['epsilon' => '0']);
        $veil = $this->createMock(ClientInterface::class);
        $veil->expects($this->once())
            ->method('noisyCount')
            ->with('orders', 0.5, ['region' => 'North'])
            ->willReturn(new Estimate(1834, 17.0, 0.95, $free, null, true, 'f'));

        $this->assertSame('1834 ± 17 orders', self::headline($veil));
    }

    /** What an application's page might do with the interface it was given. */
    private static function headline(ClientInterface $veil): string
    {
        $n = $veil->noisyCount('orders', 0.5, ['region' => 'North']);
        return sprintf('%d ± %.0f orders', $n->value, $n->errorBar);
    }
}
